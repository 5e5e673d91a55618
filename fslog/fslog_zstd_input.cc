// Reading zstd-compressed .fslog logs. See fslog_zstd_input.h.
#include "fslog/fslog_zstd_input.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

// ZSTD_frameHeaderSize_max of the zstd format (RFC 8878: 4 magic + 14 header bytes at most).
constexpr size_t kMaxFrameHeaderBytes = 18;

}  // namespace

bool StartsWithZstdMagic(const char* bytes, size_t size) {
  if (size < 4) return false;
  uint32_t magic = 0;
  std::memcpy(&magic, bytes, sizeof(magic));
  return magic == ZSTD_MAGICNUMBER;
}

// --- Whole-file stream ------------------------------------------------------------------------

ZstdStreamDecoder::ZstdStreamDecoder(std::string name, std::string_view first_bytes)
    : name_(std::move(name)), context_(ZSTD_createDCtx()) {
  input_capacity_ = std::max(ZSTD_DStreamInSize(), first_bytes.size());
  input_ = std::make_unique<char[]>(input_capacity_);
  std::memcpy(input_.get(), first_bytes.data(), first_bytes.size());
  input_end_ = first_bytes.size();
  if (context_ == nullptr) {
    error_ = absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot create a zstd decompression context", name_));
  } else {
    ZSTD_DCtx_setParameter(context_, ZSTD_d_windowLogMax, kMaxWindowLog);
  }
}

ZstdStreamDecoder::~ZstdStreamDecoder() { ZSTD_freeDCtx(context_); }

absl::StatusOr<size_t> ZstdStreamDecoder::Read(char* out, size_t max, const RawRead& read) {
  if (!error_.ok()) return error_;
  ZSTD_outBuffer output{out, max, 0};
  while (output.pos < output.size) {
    if (input_begin_ == input_end_ && !input_done_) {
      absl::StatusOr<size_t> n = read(input_.get(), input_capacity_);
      if (!n.ok()) return error_ = n.status();
      input_begin_ = 0;
      input_end_ = *n;
      input_done_ = *n == 0;
    }
    // With the input at its end, the decoder may still hold output: call it until it gives none.
    ZSTD_inBuffer input{input_.get(), input_end_, input_begin_};
    const size_t produced_before = output.pos;
    const size_t hint = ZSTD_decompressStream(context_, &output, &input);
    const size_t consumed = input.pos - input_begin_;
    input_offset_ += consumed;
    input_begin_ = input.pos;
    if (ZSTD_isError(hint)) {
      const char* why = ZSTD_getErrorCode(hint) == ZSTD_error_frameParameter_windowTooLarge
                            ? "its window is larger than this reader's 128 MiB limit"
                            : ZSTD_getErrorName(hint);
      return error_ = absl::DataLossError(
                 absl::StrFormat("%s: zstd data near compressed offset %d does not decode: %s",
                                 name_, input_offset_, why));
    }
    // A call that moved nothing says nothing new (after a frame's end it asks for the next).
    if (consumed != 0 || output.pos != produced_before) frame_open_ = hint != 0;
    if (input_done_ && input_begin_ == input_end_ && output.pos == produced_before) {
      truncated_ = frame_open_;
      break;
    }
  }
  return output.pos;
}

// --- One frame per chunk ----------------------------------------------------------------------

ZstdFrameDecoder::ZstdFrameDecoder() : context_(ZSTD_createDCtx()) {}
ZstdFrameDecoder::~ZstdFrameDecoder() { ZSTD_freeDCtx(context_); }
ZstdFrameDecoder::ZstdFrameDecoder(ZstdFrameDecoder&& other) noexcept
    : context_(std::exchange(other.context_, nullptr)) {}
ZstdFrameDecoder& ZstdFrameDecoder::operator=(ZstdFrameDecoder&& other) noexcept {
  if (this != &other) {
    ZSTD_freeDCtx(context_);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

absl::StatusOr<ZstdFrameDecoder::Frame> ZstdFrameDecoder::Decode(const char* data, size_t size,
                                                                 char* out, size_t capacity) {
  if (context_ == nullptr) return absl::ResourceExhaustedError("no zstd decompression context");
  const unsigned long long content = ZSTD_getFrameContentSize(data, size);
  if (content == ZSTD_CONTENTSIZE_ERROR) {
    // Fewer bytes than the largest frame header may be one cut short.
    if (size < kMaxFrameHeaderBytes) return Frame{};
    return absl::DataLossError("not a zstd frame");
  }
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    return absl::DataLossError("zstd frame without a content size");
  }
  if (content > capacity) {
    return absl::DataLossError(
        absl::StrFormat("zstd frame of %d bytes, more than a chunk's %d", content, capacity));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(data, size);
  if (ZSTD_isError(frame)) {
    // The bytes end inside the frame (or its blocks are malformed: a longer input says which).
    if (ZSTD_getErrorCode(frame) == ZSTD_error_srcSize_wrong) return Frame{};
    return absl::DataLossError(
        absl::StrFormat("zstd frame does not parse: %s", ZSTD_getErrorName(frame)));
  }
  const size_t n = ZSTD_decompressDCtx(context_, out, capacity, data, frame);
  if (ZSTD_isError(n)) {
    return absl::DataLossError(
        absl::StrFormat("zstd frame does not decode: %s", ZSTD_getErrorName(n)));
  }
  if (n != content) {
    return absl::DataLossError(
        absl::StrFormat("zstd frame decodes to %d bytes, its header says %d", n, content));
  }
  return Frame{true, frame, n};
}

}  // namespace fragscope
