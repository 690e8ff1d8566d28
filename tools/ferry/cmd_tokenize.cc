// ferry tokenize: not built yet (placeholder so the binary links while the command is written).
#include "cli.h"

int cmd_tokenize(int, char**) { return ferry::cli::fail("ferry tokenize is not implemented yet"); }
