// ferry bench: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_bench(int, char**) { return ferry::cli::fail("ferry bench is not implemented yet"); }
