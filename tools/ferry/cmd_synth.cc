// ferry synth: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_synth(int, char**) { return ferry::cli::fail("ferry synth is not implemented yet"); }
