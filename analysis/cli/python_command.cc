#include "analysis/cli/python_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace fragscope::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPythonCommands[] = {"predict", "carry", "fit"};

// The directory to put on PYTHONPATH so that `import fragscope` finds the package that belongs to
// this program, or "" when none is found (then the interpreter's own installation is used).
std::string PackageParent() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // The wheel's layout: <site-packages>/fragscope/bin/fragscope.
    const fs::path package = self.parent_path().parent_path();
    if (fs::is_regular_file(package / "__init__.py", ec) && package.filename() == "fragscope") {
      return package.parent_path().string();
    }
  }
  const fs::path source = FRAGSCOPE_SOURCE_PYTHON_DIR;
  if (fs::is_regular_file(source / "fragscope" / "__init__.py", ec)) return source.string();
  return "";
}

}  // namespace

bool IsPythonCommand(std::string_view name) {
  for (std::string_view c : kPythonCommands) {
    if (c == name) return true;
  }
  return false;
}

int RunPythonCommand(const std::string& name, const std::vector<std::string>& args,
                     std::ostream& err) {
  const char* env_python = std::getenv("FRAGSCOPE_PYTHON");
  const std::string python = env_python != nullptr && *env_python != '\0' ? env_python : "python3";
  if (const std::string parent = PackageParent(); !parent.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path = old != nullptr && *old != '\0' ? parent + ":" + old : parent;
    setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> argv_strings = {python, "-m", "fragscope", name};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execvp(python.c_str(), argv.data());
  const int error = errno;
  err << "fragscope " << name << ": cannot run " << python << " (" << std::strerror(error)
      << "): `fragscope " << name
      << "` runs in Python 3 with torch installed; set FRAGSCOPE_PYTHON to that interpreter\n";
  return 1;
}

}  // namespace fragscope::cli
