// UsageError: the form every fragscope command gives a usage error (a bad flag or argument).
// Header-only, with no dependencies, so that commands built into small test binaries on their own
// (dump, estimate) use it too.
#pragma once

#include <ostream>
#include <string_view>

#include "absl/strings/string_view.h"

namespace fragscope::cli {

// Prints "fragscope COMMAND: MESSAGE" and where the usage is, and returns the exit status of usage
// errors (2).
inline int UsageError(std::ostream& err, std::string_view command, absl::string_view message) {
  err << "fragscope " << command << ": " << message << "\nRun 'fragscope " << command
      << " --help' for usage.\n";
  return 2;
}

}  // namespace fragscope::cli
