#include "cli/python_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"

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

// This process's environment with the package first on PYTHONPATH, as NAME=VALUE strings.
std::vector<std::string> PythonEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env.emplace_back(*e);
  }
  const char* old = std::getenv("PYTHONPATH");
  std::string path = old != nullptr ? old : "";
  if (const std::string parent = PackageParent(); !parent.empty()) {
    path = path.empty() ? parent : parent + ":" + path;
  }
  if (!path.empty()) env.push_back("PYTHONPATH=" + path);
  return env;
}

// PYTHON -m fragscope NAME ARGS.
std::vector<std::string> PythonCommandLine(const std::string& name,
                                           const std::vector<std::string>& args) {
  const char* env_python = std::getenv("FRAGSCOPE_PYTHON");
  const std::string python = env_python != nullptr && *env_python != '\0' ? env_python : "python3";
  std::vector<std::string> line = {python, "-m", "fragscope", name};
  line.insert(line.end(), args.begin(), args.end());
  return line;
}

std::vector<char*> Argv(std::vector<std::string>& line) {
  std::vector<char*> argv;
  for (std::string& s : line) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
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
  std::vector<std::string> line = PythonCommandLine(name, args);
  std::vector<std::string> env = PythonEnvironment();
  std::cout.flush();
  execvpe(line[0].c_str(), Argv(line).data(), Argv(env).data());
  const int error = errno;
  err << "fragscope " << name << ": cannot run " << line[0] << " (" << std::strerror(error)
      << "): `fragscope " << name
      << "` runs in Python 3 with torch installed; set FRAGSCOPE_PYTHON to that interpreter\n";
  return 1;
}

absl::StatusOr<int> RunPythonChild(const std::string& name, const std::vector<std::string>& args,
                                   const std::string& output_path) {
  std::vector<std::string> line = PythonCommandLine(name, args);
  std::vector<char*> argv = Argv(line);
  std::vector<std::string> env_strings = PythonEnvironment();
  std::vector<char*> env = Argv(env_strings);
  const int fd =
      open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(output_path, ": ", std::strerror(errno)));
  }
  std::cout.flush();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execvpe(argv[0], argv.data(), env.data());
    // Only async-signal-safe calls here.
    constexpr char kWhy[] = "cannot run the Python interpreter\n";
    (void)!write(STDERR_FILENO, kWhy, sizeof(kWhy) - 1);
    _exit(127);
  }
  close(fd);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (WIFSIGNALED(status)) {
    return absl::InternalError(absl::StrCat(line[0], " was killed by signal ", WTERMSIG(status)));
  }
  return WEXITSTATUS(status);
}

}  // namespace fragscope::cli
