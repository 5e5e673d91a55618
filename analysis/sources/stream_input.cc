#include "analysis/sources/stream_input.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

// An open, unlinked temporary file in $TMPDIR or /tmp, or -1 with errno set.
int OpenAnonymousFile() {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env != nullptr && env[0] != '\0' ? env : "/tmp";
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  // A file system without O_TMPFILE: a unique name, removed at once.
  std::string name = dir + "/fragscope-stream-XXXXXX";
  fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) unlink(name.c_str());
  return fd;
}

absl::Status Errno(const std::string& path, const char* what, int error) {
  return absl::DataLossError(absl::StrFormat("%s: %s: %s", path, what, std::strerror(error)));
}

// read() that retries on EINTR; -1 with errno on an error.
ssize_t ReadSome(int fd, char* out, size_t max) {
  for (;;) {
    const ssize_t n = read(fd, out, max);
    if (n >= 0 || errno != EINTR) return n;
  }
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool IsStreamInput(const std::string& path) {
  if (path == "-") return true;
  struct stat st = {};
  return stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

absl::StatusOr<std::shared_ptr<const StreamInput>> StreamInput::Read(
    const std::string& path,
    const std::function<absl::Status(std::string_view head)>& accept_head) {
  const bool standard_input = path == "-";
  const int in = standard_input ? STDIN_FILENO : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno(path, "cannot open the file", errno);
  struct Closer {
    int fd;
    bool owned;
    ~Closer() {
      if (owned && fd >= 0) close(fd);
    }
  };
  const Closer close_in{in, !standard_input};
  // The head first: a stream that is no trace is refused before anything is copied.
  char head[16];
  size_t head_size = 0;
  while (head_size < sizeof(head)) {
    const ssize_t n = ReadSome(in, head + head_size, sizeof(head) - head_size);
    if (n < 0) return Errno(path, "cannot read", errno);
    if (n == 0) break;
    head_size += static_cast<size_t>(n);
  }
  if (absl::Status s = accept_head(std::string_view(head, head_size)); !s.ok()) return s;
  const int out = OpenAnonymousFile();
  if (out < 0) return Errno(path, "cannot make a temporary copy of the stream", errno);
  const Closer close_out{out, true};
  if (!WriteAll(out, head, head_size)) {
    return Errno(path, "cannot make a temporary copy of the stream", errno);
  }
  uint64_t total = head_size;
  std::vector<char> buffer(size_t{1} << 20);
  for (;;) {
    const ssize_t n = ReadSome(in, buffer.data(), buffer.size());
    if (n < 0) return Errno(path, "cannot read", errno);
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > kMaxStreamInputBytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: the stream is longer than the %d GiB fragscope copies from a stream (reading "
          "stopped there); give a file instead",
          path, kMaxStreamInputBytes >> 30));
    }
    if (!WriteAll(out, buffer.data(), static_cast<size_t>(n))) {
      return Errno(path, "cannot make a temporary copy of the stream", errno);
    }
  }
  auto input = std::shared_ptr<StreamInput>(new StreamInput());
  input->size_ = static_cast<size_t>(total);
  if (total > 0) {
    void* mapping = mmap(nullptr, input->size_, PROT_READ, MAP_PRIVATE, out, 0);
    if (mapping == MAP_FAILED) return Errno(path, "cannot map the stream's copy", errno);
    input->mapping_ = mapping;
    input->data_ = static_cast<const char*>(mapping);
  }
  return std::shared_ptr<const StreamInput>(std::move(input));
}

StreamInput::~StreamInput() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

}  // namespace fragscope
