#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command_line.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // The version is the project's (CMakeLists.txt's project(VERSION), which the wheel's metadata
  // also reads).
  if (!args.empty() && (args[0] == "--version" || args[0] == "-V")) {
    if (args.size() > 1) {
      std::cerr << "fragscope: " << args[0] << " takes no arguments\n";
      return 2;
    }
    std::cout << "fragscope " << FRAGSCOPE_VERSION << "\n";
    return std::cout.flush() ? 0 : 1;
  }
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
