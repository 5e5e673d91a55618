// `fragscope estimate` run in-process (RunEstimateCommand), with its exit code and what it wrote,
// for the tests of the command.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/estimate_command.h"

namespace fragscope::testing {

struct EstimateResult {
  int code;
  std::string out;
  std::string err;
};

inline EstimateResult RunEstimate(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = cli::RunEstimateCommand(args, out, err);
  return {code, out.str(), err.str()};
}

// Whether `text` holds `piece` anywhere.
inline bool Contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

}  // namespace fragscope::testing
