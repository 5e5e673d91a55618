#include "cli/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <streambuf>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/temporary_files.h"

namespace fragscope::cli {
namespace {

absl::Status CannotWrite(const std::string& path, int error) {
  return absl::PermissionDeniedError(
      absl::StrFormat("%s: cannot write: %s", path, std::strerror(error)));
}

absl::Status WriteFailed(const std::string& path, int error) {
  return absl::DataLossError(absl::StrFormat("%s: write failed: %s", path, std::strerror(error)));
}

// The directory part of `path` ("." for a bare name) and its file name.
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

// A std::ostream whose buffer goes to OutputFile::Write; the first error stops it.
class OutputFile::Stream final : public std::streambuf {
 public:
  explicit Stream(OutputFile* file) : file_(file), stream_(this) {
    setp(buffer_, buffer_ + sizeof(buffer_));
  }
  std::ostream& stream() { return stream_; }

 protected:
  int_type overflow(int_type c) override {
    if (!Drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return Drain() ? 0 : -1; }

 private:
  bool Drain() {
    if (!file_->stream_error_.ok()) return false;
    file_->stream_error_ =
        file_->Write(std::string_view(pbase(), static_cast<size_t>(pptr() - pbase())));
    setp(buffer_, buffer_ + sizeof(buffer_));
    return file_->stream_error_.ok();
  }

  OutputFile* file_;
  std::ostream stream_;
  char buffer_[1 << 16];
};

std::ostream& OutputFile::stream() {
  if (stream_ == nullptr) stream_ = std::make_unique<Stream>(this);
  return stream_->stream();
}

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(std::string path) {
  auto file = std::unique_ptr<OutputFile>(new OutputFile());
  file->path_ = std::move(path);
  const std::string& p = file->path_;
  struct stat at = {};
  const bool exists = lstat(p.c_str(), &at) == 0;
  struct stat target = at;
  const bool link = exists && S_ISLNK(at.st_mode);
  const bool target_exists = link ? stat(p.c_str(), &target) == 0 : exists;
  if (target_exists && S_ISDIR(target.st_mode)) return CannotWrite(p, EISDIR);
  if (target_exists && !S_ISREG(target.st_mode)) {
    // A device, FIFO or socket (also through a link, as /dev/stdout is): written in place.
    file->fd_ = open(p.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (file->fd_ < 0) return CannotWrite(p, errno);
    file->write_path_ = p;
    return file;
  }
  const auto [dir, name] = SplitPath(p);
  if (name.empty()) return CannotWrite(p, EISDIR);
  RemoveStaleTemporaries(dir, name);
  for (int attempt = 0; file->fd_ < 0; ++attempt) {
    file->temporary_ =
        absl::StrCat(dir == "." ? "" : dir + (dir == "/" ? "" : "/"), TemporaryName(name));
    // 0666 less the umask, as any new file; an existing file's own bits below.
    file->fd_ = open(file->temporary_.c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (file->fd_ < 0 && (errno != EEXIST || attempt >= 8)) {
      const int error = errno;
      file->temporary_.clear();
      return CannotWrite(p, error);
    }
  }
  file->signal_slot_ = RegisterTemporary(file->temporary_);
  if (exists && S_ISREG(at.st_mode)) (void)fchmod(file->fd_, at.st_mode & 07777);
  // Writers that open by name reach the descriptor itself: a name in the directory could be
  // replaced between two opens.
  const std::string by_descriptor = absl::StrCat("/proc/self/fd/", file->fd_);
  file->write_path_ = access(by_descriptor.c_str(), W_OK) == 0 ? by_descriptor : file->temporary_;
  return file;
}

OutputFile::~OutputFile() {
  stream_.reset();
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temporary_.empty()) unlink(temporary_.c_str());
  UnregisterTemporary(signal_slot_);
}

absl::Status OutputFile::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WriteFailed(path_, errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Close() {
  if (stream_ != nullptr) stream_->stream().flush();
  if (!stream_error_.ok()) return stream_error_;
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && close(fd) != 0 && errno != EINTR) return WriteFailed(path_, errno);
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  if (absl::Status s = Close(); !s.ok()) return s;
  if (!temporary_.empty() && rename(temporary_.c_str(), path_.c_str()) != 0) {
    return CannotWrite(path_, errno);
  }
  committed_ = true;
  UnregisterTemporary(std::exchange(signal_slot_, -1));
  return absl::OkStatus();
}

absl::Status WriteOutputFiles(const std::vector<OutputSpec>& outputs) {
  // Rendered first, then written with calls whose errno is read at once. Reports are small
  // (O(OOMs and timeline points), never O(events)).
  std::vector<std::unique_ptr<OutputFile>> files;
  for (const OutputSpec& output : outputs) {
    std::ostringstream text;
    output.write(text);
    absl::StatusOr<std::unique_ptr<OutputFile>> file = OutputFile::Create(output.path);
    if (!file.ok()) return file.status();
    if (absl::Status s = (*file)->Write(std::move(text).str()); !s.ok()) return s;
    files.push_back(*std::move(file));
  }
  // Every output is written and closed before any is renamed: only renames are left.
  for (const std::unique_ptr<OutputFile>& file : files) {
    if (absl::Status s = file->Close(); !s.ok()) return s;
  }
  for (const std::unique_ptr<OutputFile>& file : files) {
    if (absl::Status s = file->Commit(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WriteOutputFile(const std::string& path,
                             const std::function<void(std::ostream&)>& write) {
  return WriteOutputFiles({{path, write}});
}

}  // namespace fragscope::cli
