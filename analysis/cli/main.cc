#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "analysis/cli/command_line.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const int status = fragscope::cli::RunCommandLine(args, std::cout, std::cerr);
  // A report that did not reach standard output (a full disk, a closed pipe without SIGPIPE) is a
  // failure, not a success with nothing written.
  // (Why it failed is not known here: the failed write was buffered output, long ago.)
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::cerr << "fragscope: error writing standard output\n";
    return status != 0 ? status : 1;
  }
  return status;
}
