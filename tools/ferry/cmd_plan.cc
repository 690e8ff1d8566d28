// ferry plan: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_plan(int, char**) { return ferry::cli::fail("ferry plan is not implemented yet"); }
