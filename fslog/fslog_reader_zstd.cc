// FslogReader: chunks stored as zstd frames (Note [Compressed chunks] in
// fslog/fslog_format.h), and the end of a zstd-compressed file. See fslog_reader.h.
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "fslog/fslog_reader.h"

namespace fragscope {

absl::StatusOr<std::span<const LogRecord>> FslogReader::NextCompressedChunk(
    uint64_t* first_sequence) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t got, Fill(kMaxCompressedChunkBytes));
  const char* at = reinterpret_cast<const char*>(buffer_.get()) + begin_;
  if (frame_decoder_ == nullptr) {
    frame_decoder_ = std::make_unique<ZstdFrameDecoder>();
    frame_chunk_ = std::make_unique<uint64_t[]>(kMaxChunkBytes / sizeof(uint64_t));
  }
  char* chunk_bytes = reinterpret_cast<char*>(frame_chunk_.get());
  absl::StatusOr<ZstdFrameDecoder::Frame> frame =
      frame_decoder_->Decode(at, got, chunk_bytes, kMaxChunkBytes);
  if (!frame.ok()) {
    return Fail(absl::DataLossError(absl::StrFormat("offset %d: corrupt compressed chunk (%s)",
                                                    offset_, frame.status().message())));
  }
  if (!frame->complete) {
    if (got >= kMaxCompressedChunkBytes) {
      return Fail(absl::DataLossError(absl::StrFormat(
          "offset %d: corrupt compressed chunk (a zstd frame longer than %d bytes, more than any "
          "chunk needs)",
          offset_, kMaxCompressedChunkBytes)));
    }
    torn_tail_bytes_ = got;
    Warn(absl::StrFormat(
        "torn tail: incomplete compressed chunk at offset %d (%d bytes of its zstd frame) dropped",
        offset_, got));
    finished_ = true;
    NoteTruncatedStream();
    return std::span<const LogRecord>();
  }
  if (frame->content_bytes < kChunkHeaderBytes) {
    return Fail(absl::DataLossError(
        absl::StrFormat("offset %d: corrupt compressed chunk (%d bytes, less than a chunk header)",
                        offset_, frame->content_bytes)));
  }
  ChunkHeader chunk;
  if (absl::Status s = CheckChunkHeader(chunk_bytes, &chunk); !s.ok()) return Fail(std::move(s));
  if (frame->content_bytes != kChunkHeaderBytes + chunk.payload_bytes) {
    return Fail(absl::DataLossError(absl::StrFormat(
        "offset %d: corrupt compressed chunk (it holds %d bytes, its chunk header says %d)",
        offset_, frame->content_bytes, kChunkHeaderBytes + chunk.payload_bytes)));
  }
  return AcceptChunk(chunk_bytes, chunk, frame->frame_bytes, first_sequence);
}

void FslogReader::NoteTruncatedStream() {
  if (zstd_stream_ == nullptr || !zstd_stream_->truncated()) return;
  Warn(absl::StrFormat(
      "the compressed file ends inside a zstd frame (at compressed offset %d): it is truncated, "
      "and the log ends with the last whole chunk before that point",
      zstd_stream_->input_offset()));
}

}  // namespace fragscope
