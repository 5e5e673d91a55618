// ZstdChunkCompressor: compresses one .fslog chunk into one zstd frame (Note [Compressed chunks]
// in fslog_format.h), for FslogWriter's background thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

struct ZSTD_CCtx_s;

namespace fragscope::internal {

// The zstd levels FslogWriterOptions::zstd_level accepts (above 19 zstd needs far more memory
// and time per chunk than a writer thread should spend).
inline constexpr int kMinZstdLevel = 1;
inline constexpr int kMaxZstdLevel = 19;

class ZstdChunkCompressor {
 public:
  // Errors: kInvalidArgument for a level outside [kMinZstdLevel, kMaxZstdLevel].
  static absl::StatusOr<std::unique_ptr<ZstdChunkCompressor>> Create(int level);
  ~ZstdChunkCompressor();
  ZstdChunkCompressor(const ZstdChunkCompressor&) = delete;
  ZstdChunkCompressor& operator=(const ZstdChunkCompressor&) = delete;

  // One frame holding `bytes` bytes at `data` (at most kMaxChunkBytes), its content size
  // recorded; valid until the next call. Not thread-safe.
  absl::StatusOr<std::string_view> Compress(const void* data, size_t bytes);

 private:
  ZstdChunkCompressor() = default;

  ZSTD_CCtx_s* context_ = nullptr;
  int level_ = 0;
  std::unique_ptr<char[]> out_;
  size_t capacity_ = 0;
};

}  // namespace fragscope::internal
