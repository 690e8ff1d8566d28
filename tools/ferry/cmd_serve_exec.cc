// ferry serve: runs the ferry-serve binary from the folder this ferry binary is in (execv, same
// arguments). The HTTP server is a binary of its own so that ferry needs no shared library beyond libc
// (cpp-httplib from Debian is one, with OpenSSL; docs/ARCHITECTURE.md §7).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"

int cmd_serve_exec(int argc, char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ferry::cli::fail(std::string("ferry serve: cannot find this binary: ") + std::strerror(errno));
  self[n] = '\0';
  std::string dir(self);
  dir.resize(dir.find_last_of('/') + 1);
  const std::string server = dir + "ferry-serve";
  std::vector<char*> args;
  args.push_back(const_cast<char*>(server.c_str()));
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);  // argv[0] is "serve"
  args.push_back(nullptr);
  ::execv(server.c_str(), args.data());
  return ferry::cli::fail("ferry serve runs " + server + ", which cannot be started (" + std::strerror(errno) +
                          "): it is built beside ferry when cpp-httplib is installed (scripts/setup.sh)");
}
