// ferry profile: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_profile(int, char**) { return ferry::cli::fail("ferry profile is not implemented yet"); }
