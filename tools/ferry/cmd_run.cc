// ferry run: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_run(int, char**) { return ferry::cli::fail("ferry run is not implemented yet"); }
