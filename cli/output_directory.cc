#include "cli/output_directory.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fragscope::cli {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteFileAt(int dir_fd, const std::string& name, const std::string& content,
                         const std::string& shown) {
  const int fd =
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", shown);
  absl::string_view rest = content;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("cannot write", shown);
      ::close(fd);
      return s;
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  if (::close(fd) != 0) return Errno("cannot write", shown);
  return absl::OkStatus();
}

// What stands at `dir`: nothing, something replaceable (an empty directory or an earlier output),
// or an error naming what is there.
absl::StatusOr<bool> Replaceable(const std::filesystem::path& dir, const std::string& marker) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return Errno("cannot inspect", dir.string());
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(),
                     " is a symbolic link: not written through (remove it or name "
                     "another directory)"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(), " exists and is not a directory"));
  }
  std::error_code ec;
  const bool empty = std::filesystem::is_empty(dir, ec);
  struct stat marker_st;
  const bool earlier =
      ::lstat((dir / marker).c_str(), &marker_st) == 0 && S_ISREG(marker_st.st_mode);
  if (!empty && !earlier) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(), " holds other files (no ", marker,
                     "): not replaced; name a new or empty directory"));
  }
  return true;
}

}  // namespace

absl::Status WriteOutputDirectory(const std::string& dir_name,
                                  const std::map<std::string, std::string>& files,
                                  const std::string& marker) {
  std::filesystem::path dir(dir_name);
  while (dir.has_relative_path() && !dir.has_filename()) dir = dir.parent_path();  // "out/"
  absl::StatusOr<bool> replace = Replaceable(dir, marker);
  if (!replace.ok()) return replace.status();

  const std::filesystem::path parent = dir.has_parent_path() ? dir.parent_path() : ".";
  std::string temporary =
      (parent / absl::StrCat(".", dir.filename().string(), ".fragscope-tmp.XXXXXX")).string();
  if (::mkdtemp(temporary.data()) == nullptr)
    return Errno("cannot create a directory in", parent.string());
  bool keep = false;
  absl::Cleanup remove = [&] {
    if (keep) return;
    std::error_code ec;
    std::filesystem::remove_all(temporary, ec);
  };
  const int root = ::open(temporary.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) return Errno("cannot open", temporary);
  absl::Cleanup close_root = [root] { ::close(root); };
  std::map<std::string, int> subdirs;
  absl::Cleanup close_subdirs = [&subdirs] {
    for (const auto& [name, fd] : subdirs) ::close(fd);
  };
  for (const auto& [path, content] : files) {
    const std::string shown = (dir / path).string();
    const std::vector<std::string> parts = absl::StrSplit(path, '/');
    for (const std::string& part : parts) {
      if (part.empty() || part == "." || part == "..") {
        return absl::InvalidArgumentError(absl::StrCat(shown, ": not a file name of the output"));
      }
    }
    // Each directory on the way, created once and held open (the file is created relative to
    // it: nothing on the path can be swapped for a link meanwhile).
    int at = root;
    std::string prefix;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      prefix = prefix.empty() ? parts[k] : absl::StrCat(prefix, "/", parts[k]);
      auto it = subdirs.find(prefix);
      if (it == subdirs.end()) {
        if (::mkdirat(at, parts[k].c_str(), 0755) != 0)
          return Errno("cannot create", (dir / prefix).string());
        const int fd =
            ::openat(at, parts[k].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return Errno("cannot open", (dir / prefix).string());
        it = subdirs.emplace(prefix, fd).first;
      }
      at = it->second;
    }
    absl::Status s = WriteFileAt(at, parts.back(), content, shown);
    if (!s.ok()) return s;
  }
  if (::fchmod(root, 0755) != 0) return Errno("cannot set the mode of", temporary);

  if (!*replace) {
    if (::rename(temporary.c_str(), dir.c_str()) != 0) return Errno("cannot create", dir.string());
    keep = true;
    return absl::OkStatus();
  }
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    return Errno("cannot replace", dir.string());
  }
  return absl::OkStatus();  // the cleanup removes the earlier output, now at `temporary`
}

}  // namespace fragscope::cli
