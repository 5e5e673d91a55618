// ZstdChunkCompressor. See fslog_zstd.h.
#include "fslog/fslog_zstd.h"

#include <zstd.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "fslog/fslog_format.h"

namespace fragscope::internal {

absl::StatusOr<std::unique_ptr<ZstdChunkCompressor>> ZstdChunkCompressor::Create(int level) {
  if (level < kMinZstdLevel || level > kMaxZstdLevel) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "event log zstd level must be in [%d, %d], got %d", kMinZstdLevel, kMaxZstdLevel, level));
  }
  std::unique_ptr<ZstdChunkCompressor> compressor(new ZstdChunkCompressor());
  compressor->context_ = ZSTD_createCCtx();
  if (compressor->context_ == nullptr) {
    return absl::ResourceExhaustedError("event log: cannot create a zstd compression context");
  }
  compressor->level_ = level;
  compressor->capacity_ = ZSTD_compressBound(kMaxChunkBytes);
  compressor->out_ = std::make_unique<char[]>(compressor->capacity_);
  return compressor;
}

ZstdChunkCompressor::~ZstdChunkCompressor() { ZSTD_freeCCtx(context_); }

absl::StatusOr<std::string_view> ZstdChunkCompressor::Compress(const void* data, size_t bytes) {
  // ZSTD_compressCCtx records the content size in the frame header, which readers rely on.
  const size_t n = ZSTD_compressCCtx(context_, out_.get(), capacity_, data, bytes, level_);
  if (ZSTD_isError(n)) {
    return absl::InternalError(
        absl::StrFormat("event log: zstd compression failed: %s", ZSTD_getErrorName(n)));
  }
  return std::string_view(out_.get(), n);
}

}  // namespace fragscope::internal
