#include "analysis/cli/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_format.h"

namespace fragscope::cli {
namespace {

// Where the bytes go: the file a symbolic link names (the link itself stays a link).
std::string Target(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) return path;
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : target.string();
}

}  // namespace

OutputFile::OutputFile(std::string path) : path_(std::move(path)), write_path_(path_) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path_, ec);
  const bool in_place =
      std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
  if (!in_place) write_path_ = absl::StrFormat("%s.tmp-%d", Target(path_), getpid());
}

OutputFile::~OutputFile() {
  if (!committed_ && write_path_ != path_) std::remove(write_path_.c_str());
}

absl::Status OutputFile::Commit() {
  if (write_path_ != path_ && std::rename(write_path_.c_str(), Target(path_).c_str()) != 0) {
    return absl::InternalError(
        absl::StrFormat("%s: cannot write: %s", path_, std::strerror(errno)));
  }
  committed_ = true;
  return absl::OkStatus();
}

absl::Status WriteOutputFile(const std::string& path,
                             const std::function<void(std::ostream&)>& write) {
  // Rendered first, then written with calls whose errno is read at once: a stream's failure
  // surfaces later, after other calls may have changed errno. Reports are small (O(OOMs and
  // timeline points), never O(events)).
  std::ostringstream text;
  write(text);
  const std::string bytes = std::move(text).str();
  OutputFile output(path);
  std::FILE* file = std::fopen(output.write_path().c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot write: %s", path, std::strerror(errno)));
  }
  const bool written =
      std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() && std::fflush(file) == 0;
  const int write_errno = errno;
  if (std::fclose(file) != 0 || !written) {
    return absl::DataLossError(absl::StrFormat("%s: write failed: %s", path,
                                               std::strerror(written ? errno : write_errno)));
  }
  return output.Commit();
}

}  // namespace fragscope::cli
