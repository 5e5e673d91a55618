// The subcommands that run in Python, with torch: `fragscope predict|carry|fit` run
// `python3 -m fragscope predict|carry|fit ...` (hooks/python/fragscope/__main__.py), so that the
// one installed command reaches them too.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace fragscope::cli {

// Whether `name` is a subcommand of the Python package.
bool IsPythonCommand(std::string_view name);

// Replaces the process with `PYTHON -m fragscope NAME ARGS...` (PYTHON: $FRAGSCOPE_PYTHON, else
// python3), the package's directory first on PYTHONPATH: the directory this program was installed
// in when it is the wheel's (fragscope/bin/fragscope), else the source tree's hooks/python it was
// built from. Returns only when that fails: 1, with the reason on `err`.
int RunPythonCommand(const std::string& name, const std::vector<std::string>& args,
                     std::ostream& err);

}  // namespace fragscope::cli
