// Reading zstd-compressed .fslog logs (fslog/FORMAT.md, "Compressed logs"), for
// FslogReader:
//
//   - ZstdStreamDecoder: a whole file compressed by the `zstd` tool (job.fslog.zst), decoded as a
//     stream; the reader then reads the decompressed log as it would the plain file.
//   - ZstdFrameDecoder: one chunk stored as one zstd frame by a writer that compresses chunks
//     (Note [Compressed chunks] in fslog/fslog_format.h).
//
// Memory is bounded: a frame decodes into the caller's 64 KiB chunk buffer; a stream needs zstd's
// window, which this decoder caps at 2^kMaxWindowLog bytes (128 MiB; the `zstd` tool's levels
// 1-19 use at most 8 MiB; `--long` uses 128 MiB), and refuses larger with an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

struct ZSTD_DCtx_s;

namespace fragscope {

// Whether `bytes` (at least 4 of them) begin with the zstd frame magic.
bool StartsWithZstdMagic(const char* bytes, size_t size);

class ZstdStreamDecoder {
 public:
  static constexpr int kMaxWindowLog = 27;
  // Reads compressed bytes: how many it put in `out` (at most `max`), 0 at the end of the input.
  using RawRead = std::function<absl::StatusOr<size_t>(char* out, size_t max)>;

  // `name` prefixes errors; `first_bytes` are the input's first bytes, already read.
  ZstdStreamDecoder(std::string name, std::string_view first_bytes);
  ~ZstdStreamDecoder();
  ZstdStreamDecoder(const ZstdStreamDecoder&) = delete;
  ZstdStreamDecoder& operator=(const ZstdStreamDecoder&) = delete;

  // Up to `max` decompressed bytes into `out`, reading the rest of the input through `read`:
  // how many (0 at the end). Errors (corrupt data, a window above the cap, a read error) name the
  // compressed offset and are sticky.
  absl::StatusOr<size_t> Read(char* out, size_t max, const RawRead& read);
  // The input ended inside a frame (a truncated file): what was decoded before it was delivered.
  bool truncated() const { return truncated_; }
  // Compressed bytes consumed so far.
  uint64_t input_offset() const { return input_offset_; }

 private:
  std::string name_;
  ZSTD_DCtx_s* context_ = nullptr;
  std::unique_ptr<char[]> input_;
  size_t input_capacity_ = 0;
  size_t input_begin_ = 0;
  size_t input_end_ = 0;
  bool input_done_ = false;
  bool frame_open_ = false;  // inside a frame: the decoder needs more input to finish it
  bool truncated_ = false;
  uint64_t input_offset_ = 0;
  absl::Status error_;
};

class ZstdFrameDecoder {
 public:
  ZstdFrameDecoder();
  ~ZstdFrameDecoder();
  ZstdFrameDecoder(ZstdFrameDecoder&& other) noexcept;
  ZstdFrameDecoder& operator=(ZstdFrameDecoder&& other) noexcept;

  struct Frame {
    bool complete = false;     // false: the bytes end inside the frame
    size_t frame_bytes = 0;    // compressed size, when complete
    size_t content_bytes = 0;  // decompressed size, when complete
  };
  // Decodes the frame at the start of `data` (`size` bytes available) into `out`, which holds
  // `capacity` bytes. Errors (the message, without an offset): the bytes are not a frame, its
  // content is larger than `capacity` or not recorded, or it does not decode.
  absl::StatusOr<Frame> Decode(const char* data, size_t size, char* out, size_t capacity);

 private:
  ZSTD_DCtx_s* context_ = nullptr;
};

}  // namespace fragscope
