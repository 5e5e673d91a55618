// StreamInput: a trace given as a stream rather than a file (`-` for standard input, a pipe, a
// FIFO, `<(...)`, a character device), which can be read only once.
//
// Every command reads a trace more than once (the format's magic bytes, the state records at
// the start of an .fslog, one replay per sweep configuration), so a stream is first copied, in
// one pass, into an unlinked temporary file in $TMPDIR (or /tmp) that is mapped into memory and
// read from there; it disappears with the process. The copy is bounded: the first bytes must
// be a format fragscope reads (else the error comes at once, without reading on), and the whole
// stream at most kMaxStreamInputBytes (an error saying so when reached).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fragscope {

// The most a stream is copied: the largest input any reader accepts (an RMM CSV's limit).
inline constexpr uint64_t kMaxStreamInputBytes = uint64_t{64} << 30;

// Whether `path` is read as a stream: "-", or something that exists and is neither a regular
// file nor a directory (following links: /dev/stdin is one).
bool IsStreamInput(const std::string& path);

class StreamInput {
 public:
  // Copies the stream `path` names. `accept_head` sees its first bytes (up to 16) and returns
  // an error for a stream that is no trace, which stops the copy there. Errors name `path`.
  static absl::StatusOr<std::shared_ptr<const StreamInput>> Read(
      const std::string& path,
      const std::function<absl::Status(std::string_view head)>& accept_head);
  ~StreamInput();
  StreamInput(const StreamInput&) = delete;
  StreamInput& operator=(const StreamInput&) = delete;

  // Everything the stream held; valid while this object lives.
  std::string_view bytes() const { return {data_, size_}; }

 private:
  StreamInput() = default;
  const char* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
};

}  // namespace fragscope
