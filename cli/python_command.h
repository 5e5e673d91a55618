// The subcommands that run in Python, with torch: `fragscope predict|carry|fit` run
// `python3 -m fragscope predict|carry|fit ...` (hooks/python/fragscope/__main__.py), so that the
// one installed command reaches them too.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragscope::cli {

// Whether `name` is a subcommand of the Python package.
bool IsPythonCommand(std::string_view name);

// Replaces the process with `PYTHON -m fragscope NAME ARGS...` (PYTHON: $FRAGSCOPE_PYTHON, else
// python3), the package's directory first on PYTHONPATH: the directory this program was installed
// in when it is the wheel's (fragscope/bin/fragscope), else the source tree's hooks/python it was
// built from. Returns only when that fails: 1, with the reason on `err`.
int RunPythonCommand(const std::string& name, const std::vector<std::string>& args,
                     std::ostream& err);

// Runs `PYTHON -m fragscope NAME ARGS...` (as RunPythonCommand sets it up) as a child process,
// its standard output and error into `output_path` (created or truncated), and waits for it.
// Returns its exit status (127: the interpreter could not be run), or an error when no child could
// be started or it was killed by a signal.
absl::StatusOr<int> RunPythonChild(const std::string& name, const std::vector<std::string>& args,
                                   const std::string& output_path);

}  // namespace fragscope::cli
