// Runs `fragscope ARGS...` through the command dispatcher in-process, capturing both streams.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/command_line.h"

namespace fragscope::testing {

struct CommandRun {
  int code = 0;
  std::string out;
  std::string err;
};

inline CommandRun Fragscope(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CommandRun r;
  r.code = cli::RunCommandLine(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace fragscope::testing
