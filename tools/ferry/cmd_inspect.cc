// ferry inspect: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_inspect(int, char**) { return ferry::cli::fail("ferry inspect is not implemented yet"); }
