// FslogReader. See fslog_reader.h and fslog/FORMAT.md.
#include "fslog/fslog_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "fslog/crc32c.h"
#include "fslog/fslog_context.h"
#include "fslog/fslog_zstd_input.h"

namespace fragscope {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = absl::StrFormat("%s: %s", what, std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

// Whether `bytes` (shorter than a chunk header) could be the start of one.
bool IsChunkMagicPrefix(const char* bytes, size_t size) {
  uint32_t magic = kChunkMagic;
  return std::memcmp(bytes, &magic, std::min<size_t>(size, sizeof(magic))) == 0;
}

// Whether `bytes` (fewer than four) could be the start of a zstd frame (a compressed chunk).
bool IsZstdMagicPrefix(const char* bytes, size_t size) {
  uint32_t magic = kZstdFrameMagic;
  return size < sizeof(magic) && std::memcmp(bytes, &magic, size) == 0;
}

}  // namespace

absl::StatusOr<FslogReader> FslogReader::Open(const std::string& path) {
  FslogReader reader;
  reader.name_ = path;
  reader.fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (reader.fd_ < 0) return ErrnoStatus(errno, "cannot open event log " + path);
  FRAGSCOPE_RETURN_IF_ERROR(reader.ReadHeader());
  return reader;
}

absl::StatusOr<FslogReader> FslogReader::OpenBytes(std::string_view bytes, std::string name) {
  FslogReader reader;
  reader.name_ = std::move(name);
  reader.memory_ = bytes;
  FRAGSCOPE_RETURN_IF_ERROR(reader.ReadHeader());
  return reader;
}

FslogReader::FslogReader(FslogReader&& other) noexcept { *this = std::move(other); }

FslogReader& FslogReader::operator=(FslogReader&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) close(fd_);
  name_ = std::move(other.name_);
  fd_ = std::exchange(other.fd_, -1);
  memory_ = other.memory_;
  header_ = std::move(other.header_);
  buffer_ = std::move(other.buffer_);
  buffer_bytes_ = other.buffer_bytes_;
  begin_ = other.begin_;
  end_ = other.end_;
  source_done_ = other.source_done_;
  offset_ = other.offset_;
  finished_ = other.finished_;
  error_ = std::move(other.error_);
  expected_sequence_ = other.expected_sequence_;
  torn_tail_bytes_ = other.torn_tail_bytes_;
  missing_records_ = other.missing_records_;
  warnings_ = std::move(other.warnings_);
  suppressed_warnings_ = other.suppressed_warnings_;
  chunk_ = other.chunk_;  // points into buffer_, which moved with it
  chunk_pos_ = other.chunk_pos_;
  chunk_first_sequence_ = other.chunk_first_sequence_;
  combined_before_ = other.combined_before_;
  has_pending_completion_ = other.has_pending_completion_;
  zstd_stream_ = std::move(other.zstd_stream_);
  frame_decoder_ = std::move(other.frame_decoder_);
  frame_chunk_ = std::move(other.frame_chunk_);
  return *this;
}

FslogReader::~FslogReader() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<size_t> FslogReader::ReadSource(char* out, size_t max) {
  if (zstd_stream_ != nullptr) {
    return zstd_stream_->Read(out, max, [this](char* raw, size_t n) { return ReadRaw(raw, n); });
  }
  return ReadRaw(out, max);
}

absl::StatusOr<size_t> FslogReader::ReadRaw(char* out, size_t max) {
  if (fd_ < 0) {
    const size_t n = std::min(max, memory_.size());
    std::memcpy(out, memory_.data(), n);
    memory_.remove_prefix(n);
    return n;
  }
  for (;;) {
    const ssize_t n = read(fd_, out, max);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) {
      return ErrnoStatus(errno, absl::StrFormat("reading %s near offset %d", name_, offset_));
    }
  }
}

absl::StatusOr<size_t> FslogReader::Fill(size_t bytes) {
  // A request beyond the buffer can only come from a memory source shorter than the request
  // (see ReadHeader), which then ends first.
  bytes = std::min(bytes, buffer_bytes_);
  char* base = reinterpret_cast<char*>(buffer_.get());
  if (begin_ == end_) begin_ = end_ = 0;
  if (begin_ + bytes > buffer_bytes_) {
    // begin_ is always a multiple of 8 (every section length is), so records stay aligned.
    std::memmove(base, base + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ - begin_ < bytes && !source_done_) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const size_t n, ReadSource(base + end_, buffer_bytes_ - end_));
    if (n == 0) source_done_ = true;
    end_ += n;
  }
  return std::min(bytes, end_ - begin_);
}

absl::Status FslogReader::Fail(absl::Status status) {
  error_ = absl::Status(status.code(), absl::StrFormat("%s: %s", name_, status.message()));
  finished_ = true;
  return error_;
}

void FslogReader::Warn(std::string warning) {
  if (warnings_.size() < kMaxWarnings) {
    warnings_.push_back(absl::StrFormat("%s: %s", name_, warning));
  } else {
    ++suppressed_warnings_;
  }
}

absl::Status FslogReader::ReadHeader() {
  // The first bytes say whether the whole input is zstd-compressed (fslog_zstd_input.h).
  char head[4];
  size_t peeked = 0;
  while (peeked < sizeof(head)) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const size_t n, ReadRaw(head + peeked, sizeof(head) - peeked));
    if (n == 0) break;
    peeked += n;
  }
  const bool compressed = StartsWithZstdMagic(head, peeked);
  if (compressed) {
    name_ += " (zstd-compressed; offsets are of the decompressed log)";
    zstd_stream_ = std::make_unique<ZstdStreamDecoder>(name_, std::string_view(head, peeked));
  }
  // A plain memory source never needs more buffer than its own size.
  buffer_bytes_ = fd_ >= 0 || compressed
                      ? kReadBufferBytes
                      : std::min(kReadBufferBytes, (memory_.size() + peeked + 7) / 8 * 8);
  buffer_bytes_ = std::max<size_t>(buffer_bytes_, 8);
  buffer_.reset(
      new uint64_t[buffer_bytes_ / sizeof(uint64_t)]);  // not zeroed: only read bytes are used
  if (!compressed) {
    std::memcpy(buffer_.get(), head, peeked);
    end_ = peeked;
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t fixed, Fill(kFileHeaderBytes));
  const char* base = reinterpret_cast<const char*>(buffer_.get());
  if (fixed >= sizeof(kFileMagic) && std::memcmp(base, kFileMagic, sizeof(kFileMagic)) != 0) {
    return Fail(absl::InvalidArgumentError("offset 0: bad magic, not an .fslog file"));
  }
  auto size = ParseFileHeaderSize(std::string_view(base, fixed));
  if (!size.ok()) return Fail(size.status());
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t got, Fill(*size));
  if (got < *size) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "offset %d: file ends inside its header (%d of %d bytes)", got, got, *size)));
  }
  auto header = ParseFileHeader(std::string_view(base, *size));
  if (!header.ok()) return Fail(header.status());
  header_ = *std::move(header);
  begin_ += *size;
  offset_ = *size;
  return absl::OkStatus();
}

absl::StatusOr<std::span<const LogRecord>> FslogReader::NextChunk(uint64_t* first_sequence) {
  if (!error_.ok()) return error_;
  if (finished_) return std::span<const LogRecord>();
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t have, Fill(kChunkHeaderBytes));
  const char* at = reinterpret_cast<const char*>(buffer_.get()) + begin_;
  if (have == 0) {
    finished_ = true;
    NoteTruncatedStream();
    if (suppressed_warnings_ > 0) {
      warnings_.push_back(
          absl::StrFormat("%s: %d more warnings not shown", name_, suppressed_warnings_));
    }
    return std::span<const LogRecord>();
  }
  if (StartsWithZstdMagic(at, have)) return NextCompressedChunk(first_sequence);
  if (have < kChunkHeaderBytes) {
    if (!IsChunkMagicPrefix(at, have) && !IsZstdMagicPrefix(at, have)) {
      return Fail(absl::DataLossError(absl::StrFormat("offset %d: bad chunk magic", offset_)));
    }
    torn_tail_bytes_ = have;
    Warn(absl::StrFormat("torn tail: %d bytes at offset %d (an incomplete chunk header) dropped",
                         have, offset_));
    finished_ = true;
    NoteTruncatedStream();
    return std::span<const LogRecord>();
  }
  ChunkHeader chunk;
  if (absl::Status s = CheckChunkHeader(at, &chunk); !s.ok()) return Fail(std::move(s));
  const size_t chunk_bytes = kChunkHeaderBytes + chunk.payload_bytes;
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t got, Fill(chunk_bytes));
  at = reinterpret_cast<const char*>(buffer_.get()) + begin_;  // Fill may have moved the bytes
  if (got < chunk_bytes) {
    torn_tail_bytes_ = got;
    Warn(absl::StrFormat(
        "torn tail: incomplete chunk at offset %d (%d of %d bytes present, %d records) dropped",
        offset_, got, chunk_bytes, chunk.record_count));
    finished_ = true;
    NoteTruncatedStream();
    return std::span<const LogRecord>();
  }
  return AcceptChunk(at, chunk, chunk_bytes, first_sequence);
}

absl::Status FslogReader::CheckChunkHeader(const char* at, ChunkHeader* chunk) const {
  std::memcpy(chunk, at, sizeof(*chunk));
  if (chunk->magic != kChunkMagic) {
    return absl::DataLossError(
        absl::StrFormat("offset %d: bad chunk magic %08x", offset_, chunk->magic));
  }
  const uint32_t header_crc = Crc32c(at, kChunkHeaderCrcCoveredBytes);
  if (header_crc != chunk->header_crc32c) {
    return absl::DataLossError(
        absl::StrFormat("offset %d: corrupt chunk header (CRC stored %08x, computed %08x)", offset_,
                        chunk->header_crc32c, header_crc));
  }
  if (chunk->record_count == 0 || chunk->record_count > kMaxChunkRecords ||
      chunk->payload_bytes != uint64_t{chunk->record_count} * kRecordBytes) {
    return absl::DataLossError(
        absl::StrFormat("offset %d: impossible chunk length (%d records, %d payload bytes)",
                        offset_, chunk->record_count, chunk->payload_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const LogRecord>> FslogReader::AcceptChunk(const char* at,
                                                                    const ChunkHeader& chunk,
                                                                    size_t consumed,
                                                                    uint64_t* first_sequence) {
  const uint32_t payload_crc = Crc32c(at + kChunkHeaderBytes, chunk.payload_bytes);
  if (payload_crc != chunk.payload_crc32c) {
    return Fail(absl::DataLossError(absl::StrFormat(
        "offset %d: corrupt chunk (payload CRC stored %08x, computed %08x; records %d..%d)",
        offset_, chunk.payload_crc32c, payload_crc, chunk.first_sequence,
        chunk.first_sequence + chunk.record_count - 1)));
  }
  if (chunk.first_sequence < expected_sequence_) {
    return Fail(absl::DataLossError(
        absl::StrFormat("offset %d: chunk sequence %d goes backwards (expected >= %d)", offset_,
                        chunk.first_sequence, expected_sequence_)));
  }
  if (chunk.first_sequence > kMaxSequence - chunk.record_count) {
    return Fail(absl::DataLossError(
        absl::StrFormat("offset %d: chunk sequence %d out of range (%d records; the format's "
                        "limit is 2^62)",
                        offset_, chunk.first_sequence, chunk.record_count)));
  }
  if (chunk.first_sequence > expected_sequence_) {
    const uint64_t missing = chunk.first_sequence - expected_sequence_;
    missing_records_ += missing;
    Warn(absl::StrFormat("offset %d: %d records missing before sequence %d (dropped by the writer)",
                         offset_, missing, chunk.first_sequence));
  }
  expected_sequence_ = chunk.first_sequence + chunk.record_count;
  if (first_sequence != nullptr) *first_sequence = chunk.first_sequence;
  const char* payload = at + kChunkHeaderBytes;
  const LogRecord* records = reinterpret_cast<const LogRecord*>(payload);
  if (reinterpret_cast<uintptr_t>(payload) % alignof(LogRecord) != 0) {
    realigned_.resize(chunk.record_count);
    std::memcpy(static_cast<void*>(realigned_.data()), payload,
                size_t{chunk.record_count} * kRecordBytes);
    records = realigned_.data();
  }
  begin_ += consumed;
  offset_ += consumed;
  return std::span<const LogRecord>(records, chunk.record_count);
}

absl::StatusOr<bool> FslogReader::Next(LogEntry* entry) {
  if (has_pending_completion_) {  // the second half of the combined free returned last
    has_pending_completion_ = false;
    LogRecord requested;
    SplitCombinedFree(chunk_[chunk_pos_ - 1], &requested, &entry->record);
    // One more than its first half's number (combined_before_ already counts the record).
    entry->sequence = chunk_first_sequence_ + chunk_pos_ - 1 + combined_before_;
    entry->text.clear();
    return true;
  }
  for (;;) {
    while (chunk_pos_ < chunk_.size()) {
      const LogRecord& record = chunk_[chunk_pos_];
      entry->sequence = chunk_first_sequence_ + chunk_pos_ + combined_before_;
      ++chunk_pos_;
      entry->record = record;
      entry->text.clear();
      if (IsCombinedFree(record) && has_combined_frees()) {
        LogRecord completed;
        SplitCombinedFree(record, &entry->record, &completed);
        has_pending_completion_ = true;
        ++combined_before_;
      } else if (record.kind == static_cast<uint8_t>(EventKind::kMarker)) {
        const std::string_view text = MarkerText(record);
        entry->text.assign(text.data(), text.size());
      } else if (UsesLongTextLayout(record.kind) || record.kind == kRecordKindString) {
        // A text over a first record and continuation records: options changes, models, strings.
        const bool string = record.kind == kRecordKindString;
        const auto part = [string](const LogRecord& r) {
          return string ? StringTextPart(r) : OptionsChangeTextPart(r);
        };
        if (record.flags & kRecordFlagContinuation) {
          Warn(absl::StrFormat("sequence %d: %s continuation without a start", entry->sequence,
                               RecordKindName(record.kind)));
          continue;
        }
        const std::string_view first = part(record);
        entry->text.assign(first.data(), first.size());
        while (chunk_pos_ < chunk_.size() && chunk_[chunk_pos_].kind == record.kind &&
               (chunk_[chunk_pos_].flags & kRecordFlagContinuation)) {
          const std::string_view more = part(chunk_[chunk_pos_++]);
          entry->text.append(more.data(), more.size());
        }
        const uint64_t total = record.words[string ? kWordStringBytes : 0];
        if (entry->text.size() != total) {
          Warn(absl::StrFormat("sequence %d: %s has %d text bytes, its record says %d",
                               entry->sequence, RecordKindName(record.kind), entry->text.size(),
                               total));
        }
      }
      return true;
    }
    FRAGSCOPE_ASSIGN_OR_RETURN(chunk_, NextChunk(&chunk_first_sequence_));
    chunk_pos_ = 0;
    if (chunk_.empty()) return false;
  }
}

}  // namespace fragscope
