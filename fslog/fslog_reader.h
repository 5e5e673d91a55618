// FslogReader: streams an .fslog file (fslog/FORMAT.md) chunk by chunk in
// bounded memory.
//
// Memory: one read buffer of kReadBufferBytes (less for a smaller in-memory log) allocated at
// Open and reused for every chunk, plus at most kMaxWarnings warning strings and one options
// text (<= 52 KiB). The file is never loaded whole; reading is sequential read() calls of up to
// 1 MiB.
//
// Compressed logs (fslog_zstd_input.h) are read transparently: a file that starts with the zstd
// magic (the `zstd` tool's output) is decompressed as a stream, and errors then name offsets of the
// decompressed log; a chunk stored as a zstd frame (Note [Compressed chunks] in
// fslog/fslog_format.h) is decoded into a chunk buffer of its own and checked like any
// chunk, its errors naming the frame's file offset. Both add at most zstd's buffers to the memory
// above (for a compressed file, its window: at most 128 MiB, typically 8 MiB or less).
//
// Damage policy (see FORMAT.md, "Reading damaged files"):
//   - a torn tail (the file ends inside a chunk whose header is intact, or inside a chunk header
//     whose bytes so far are a valid prefix) is dropped: reading ends normally, warnings() says
//     how many bytes were dropped and torn_tail_bytes() counts them;
//   - a gap in sequence numbers (records the writer dropped) is a warning, counted in
//     missing_records();
//   - anything else (bad magic, unknown major version, CRC mismatch, impossible lengths, sequence
//     numbers going backwards) is an error naming the file offset. Records before it have been
//     delivered; the error is sticky.
// No input makes the reader crash, hang or allocate without bound (it is fuzzed:
// tests/fuzz/fslog_reader_fuzz.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_zstd_input.h"

namespace fragscope {

// One logical record: an allocator event, a marker, or a whole options change (its continuation
// records folded into `text`).
struct LogEntry {
  // The event's number in the log: its record's sequence number plus the number of combined free
  // records before it, each of which stands for two events (Note [Combined free records] in
  // fslog_format.h); the record sequence itself in a 1.x log.
  uint64_t sequence = 0;
  LogRecord record{};  // for an options change, its first record
  std::string text;    // marker and options_change text; empty for other kinds

  EventKind kind() const { return static_cast<EventKind>(record.kind); }
  // The allocator event (meaningful for allocator kinds only).
  AllocatorEvent event() const { return DecodeEvent(record); }
};

class FslogReader {
 public:
  // Read buffer: large sequential reads, and room for the largest chunk or header.
  static constexpr size_t kReadBufferBytes = 1024 * 1024 + kMaxFileHeaderBytes;
  static constexpr size_t kMaxWarnings = 100;

  // Opens `path` and reads its header. Errors: the errno mapping of open()/read(), or the header
  // errors of ParseFileHeader (bad magic, unknown version, corrupt header), naming the offset.
  static absl::StatusOr<FslogReader> Open(const std::string& path);
  // Reads a log held in memory (tests, fuzzing). REQUIRES: `bytes` outlives the reader.
  static absl::StatusOr<FslogReader> OpenBytes(std::string_view bytes,
                                               std::string name = "<memory>");

  FslogReader(FslogReader&& other) noexcept;
  FslogReader& operator=(FslogReader&& other) noexcept;
  ~FslogReader();

  const FslogHeader& header() const { return header_; }
  const std::string& name() const { return name_; }

  // The next chunk's raw records (continuation records included), valid until the next call;
  // an empty span at the end of the log. *first_sequence, if given, receives the sequence number
  // of the first record. Fastest way through a log. Do not mix with Next(). When
  // has_combined_frees(), a record for which IsCombinedFree() holds stands for two events
  // (SplitCombinedFree; Note [Combined free records] in fslog_format.h).
  absl::StatusOr<std::span<const LogRecord>> NextChunk(uint64_t* first_sequence = nullptr);

  // The next logical record; false at the end of the log. A combined free record comes out as
  // its two events (free_requested, then free_completed: consecutive numbers).
  absl::StatusOr<bool> Next(LogEntry* entry);

  // Whether the log may hold combined free records (format 2.0 and later).
  bool has_combined_frees() const { return header_.version_major >= 2; }

  // Torn tail, sequence gaps, malformed text records; at most kMaxWarnings (then a count).
  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t torn_tail_bytes() const { return torn_tail_bytes_; }
  uint64_t missing_records() const { return missing_records_; }
  // File offset of the next unread chunk (of the decompressed log, for a compressed file).
  uint64_t offset() const { return offset_; }
  // Bytes of the input file consumed so far (for progress): offset(), or the compressed bytes
  // read of a compressed file.
  uint64_t input_offset() const {
    return zstd_stream_ != nullptr ? zstd_stream_->input_offset() : offset_;
  }
  // The whole input is zstd-compressed (a `zstd`-compressed log; see fslog_zstd_input.h).
  bool compressed() const { return zstd_stream_ != nullptr; }

 private:
  FslogReader() = default;
  absl::Status ReadHeader();
  // NextChunk's checks: the chunk header at `at` (magic, CRC, lengths), then the whole chunk
  // (payload CRC, sequence), which AcceptChunk also consumes (`consumed` input bytes).
  absl::Status CheckChunkHeader(const char* at, ChunkHeader* chunk) const;
  absl::StatusOr<std::span<const LogRecord>> AcceptChunk(const char* at, const ChunkHeader& chunk,
                                                         size_t consumed, uint64_t* first_sequence);
  // NextChunk for a chunk stored as a zstd frame (fslog_reader_zstd.cc).
  absl::StatusOr<std::span<const LogRecord>> NextCompressedChunk(uint64_t* first_sequence);
  // At the end of the input: warns if a compressed file ends inside a zstd frame.
  void NoteTruncatedStream();
  // The input's bytes: ReadRaw's, decompressed when the whole input is compressed.
  absl::StatusOr<size_t> ReadRaw(char* out, size_t max);
  // Ensures `bytes` readable bytes at begin_ unless the input ends first; returns how many are.
  absl::StatusOr<size_t> Fill(size_t bytes);
  absl::StatusOr<size_t> ReadSource(char* out, size_t max);
  absl::Status Fail(absl::Status status);
  void Warn(std::string warning);

  std::string name_;
  int fd_ = -1;              // file source, or
  std::string_view memory_;  // memory source (the unread rest)
  FslogHeader header_;
  std::unique_ptr<uint64_t[]> buffer_;  // buffer_bytes_, 8-byte aligned for LogRecord
  size_t buffer_bytes_ = 0;             // kReadBufferBytes for files; less for small inputs
  size_t begin_ = 0;                    // unread bytes are buffer[begin_, end_)
  size_t end_ = 0;
  bool source_done_ = false;
  uint64_t offset_ = 0;  // file offset of buffer[begin_]
  bool finished_ = false;
  absl::Status error_;  // sticky

  uint64_t expected_sequence_ = 0;
  uint64_t torn_tail_bytes_ = 0;
  uint64_t missing_records_ = 0;
  std::vector<std::string> warnings_;
  uint64_t suppressed_warnings_ = 0;

  // Next()'s position in the current chunk.
  std::span<const LogRecord> chunk_;
  size_t chunk_pos_ = 0;
  uint64_t chunk_first_sequence_ = 0;
  // Next() returned the free_requested half of chunk_[chunk_pos_ - 1], a combined free record;
  // its free_completed half comes next.
  bool has_pending_completion_ = false;
  uint64_t combined_before_ = 0;  // combined free records Next() has passed

  // Compressed input: the whole file (zstd_stream_), or chunks stored as zstd frames, decoded
  // into frame_chunk_ (kMaxChunkBytes, allocated at the first such chunk).
  std::unique_ptr<ZstdStreamDecoder> zstd_stream_;
  std::unique_ptr<ZstdFrameDecoder> frame_decoder_;
  std::unique_ptr<uint64_t[]> frame_chunk_;
  // A plain chunk after a compressed frame (whose length is not a multiple of 8) can start at an
  // unaligned address in memory: its records are copied here, aligned.
  std::vector<LogRecord> realigned_;
};

}  // namespace fragscope
