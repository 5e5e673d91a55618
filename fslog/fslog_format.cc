// Encoders and decoders of the .fslog format. See fslog_format.h and FORMAT.md.
#include "fslog/fslog_format.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "fslog/crc32c.h"
#include "fslog/fslog_context.h"

namespace fragscope {
namespace {

char* RecordBytes(LogRecord* record) { return reinterpret_cast<char*>(record); }
const char* RecordBytes(const LogRecord& record) { return reinterpret_cast<const char*>(&record); }

size_t RoundUp8(size_t n) { return (n + 7) & ~size_t{7}; }

void CopyField(std::string_view text, char (&field)[64]) {
  const std::string_view kept = TruncateUtf8(text, sizeof(field));
  std::memcpy(field, kept.data(), kept.size());
}

std::string ReadField(const char (&field)[64]) {
  const auto* end = static_cast<const char*>(std::memchr(field, '\0', sizeof(field)));
  return std::string(field, end == nullptr ? sizeof(field) : static_cast<size_t>(end - field));
}

}  // namespace

std::string_view TruncateUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  // text[cut] is the first byte left out; if it continues a character, drop that whole character.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

std::string_view RecordKindName(uint8_t kind) {
  if (kind == kRecordKindStateSegment) return "state_segment";
  if (kind == kRecordKindStateBlock) return "state_block";
  if (kind == kRecordKindString) return "string";
  if (kind == kRecordKindContext) return "context";
  if (kind == kRecordKindOomContext) return "oom_context";
  return EventKindName(static_cast<EventKind>(kind));
}

void EncodeStateRecord(uint8_t kind, DevicePtr ptr, uint64_t bytes, uint64_t requested_bytes,
                       StreamId stream, DevicePtr segment, PoolKind pool, int32_t device,
                       uint64_t timestamp_ns, LogRecord* record) {
  *record = LogRecord{};
  record->timestamp_ns = timestamp_ns;
  record->kind = kind;
  record->pool = static_cast<uint8_t>(pool);
  record->device = device;
  record->words[kWordPtr] = ptr;
  record->words[kWordBytes] = bytes;
  record->words[kWordRequestedBytes] = requested_bytes;
  record->words[kWordStream] = stream;
  record->words[kWordSegment] = segment;
}

void EncodeMarker(std::string_view text, uint64_t thread_id, uint64_t timestamp_ns,
                  LogRecord* record) {
  std::memset(record, 0, sizeof(*record));
  const std::string_view kept = TruncateUtf8(text, kMaxMarkerTextBytes);
  record->timestamp_ns = timestamp_ns;
  record->kind = static_cast<uint8_t>(EventKind::kMarker);
  record->flags = kept.size() < text.size() ? kRecordFlagTruncated : 0;
  record->aux = static_cast<uint8_t>(kept.size());
  record->words[0] = thread_id;
  std::memcpy(RecordBytes(record) + kFirstTextOffset, kept.data(), kept.size());
}

void EncodeTag(DevicePtr ptr, uint8_t role, uint64_t timestamp_ns, int32_t device,
               LogRecord* record) {
  std::memset(record, 0, sizeof(*record));
  record->timestamp_ns = timestamp_ns;
  record->kind = static_cast<uint8_t>(EventKind::kTag);
  record->device = device;
  record->words[kWordPtr] = ptr;
  record->words[kWordTagRole] = role;
}

std::string_view MarkerText(const LogRecord& record) {
  return std::string_view(RecordBytes(record) + kFirstTextOffset,
                          std::min<size_t>(record.aux, kMaxMarkerTextBytes));
}

namespace {

// A first record and continuation records of `kind` (UsesLongTextLayout).
size_t EncodeLongText(EventKind kind, std::string_view options, uint64_t timestamp_ns,
                      int32_t device, LogRecord* out) {
  const std::string_view text = TruncateUtf8(options, kMaxOptionsChangeTextBytes);
  size_t n = 0;
  size_t pos = 0;
  do {
    LogRecord* r = &out[n];
    std::memset(r, 0, sizeof(*r));
    r->timestamp_ns = timestamp_ns;
    r->kind = static_cast<uint8_t>(kind);
    r->device = device;
    const bool first = n == 0;
    const size_t room = first ? kOptionsFirstRecordTextBytes : kOptionsContinuationTextBytes;
    const size_t part = std::min(room, text.size() - pos);
    if (first) {
      r->flags = text.size() < options.size() ? kRecordFlagTruncated : 0;
      r->words[0] = text.size();
    } else {
      r->flags = kRecordFlagContinuation;
    }
    r->aux = static_cast<uint8_t>(part);
    std::memcpy(RecordBytes(r) + (first ? kFirstTextOffset : kContinuationTextOffset),
                text.data() + pos, part);
    pos += part;
    ++n;
  } while (pos < text.size());
  return n;
}

}  // namespace

size_t EncodeOptionsChange(std::string_view options, uint64_t timestamp_ns, int32_t device,
                           LogRecord* out) {
  return EncodeLongText(EventKind::kOptionsChange, options, timestamp_ns, device, out);
}

size_t EncodeModel(std::string_view json, uint64_t timestamp_ns, int32_t device, LogRecord* out) {
  return EncodeLongText(EventKind::kModel, json, timestamp_ns, device, out);
}

std::string_view OptionsChangeTextPart(const LogRecord& record) {
  if (record.flags & kRecordFlagContinuation) {
    return std::string_view(RecordBytes(record) + kContinuationTextOffset,
                            std::min<size_t>(record.aux, kOptionsContinuationTextBytes));
  }
  return std::string_view(RecordBytes(record) + kFirstTextOffset,
                          std::min<size_t>(record.aux, kOptionsFirstRecordTextBytes));
}

std::string SerializeFileHeader(const FslogHeader& header) {
  FileHeader fixed;
  std::memset(&fixed, 0, sizeof(fixed));
  std::memcpy(fixed.magic, kFileMagic, sizeof(kFileMagic));
  fixed.version_major = header.version_major;
  fixed.version_minor = header.version_minor;
  fixed.record_bytes = kRecordBytes;
  fixed.clock = static_cast<uint32_t>(header.clock);
  fixed.device_index = header.device_index;
  fixed.device_total_bytes = header.device_total_bytes;
  fixed.pid = header.pid;
  fixed.rank = header.rank;
  fixed.local_rank = header.local_rank;
  fixed.world_size = header.world_size;
  fixed.start_wall_ns = header.start_wall_ns;
  fixed.start_monotonic_ns = header.start_monotonic_ns;
  CopyField(header.device_name, fixed.device_name);
  CopyField(header.host, fixed.host);
  if (header.device_free_at_open_bytes.has_value()) {
    fixed.header_flags |= kHeaderFlagOpenMemory;
    fixed.device_free_at_open = *header.device_free_at_open_bytes;
    fixed.reserved_at_open = header.reserved_at_open_bytes;
  }
  if (header.zstd_chunks) fixed.header_flags |= kHeaderFlagZstdChunks;
  if (!header.records_empty_cache) fixed.header_flags |= kHeaderFlagNoEmptyCacheRecords;
  fixed.pp_size = header.pp_size;
  fixed.tp_size = header.tp_size;
  const std::string_view options = TruncateUtf8(header.allocator_options, kMaxHeaderOptionsBytes);
  fixed.options_bytes = static_cast<uint32_t>(options.size());
  fixed.header_bytes = static_cast<uint32_t>(kFileHeaderBytes + RoundUp8(options.size()));

  std::string bytes(fixed.header_bytes, '\0');
  std::memcpy(bytes.data() + kFileHeaderBytes, options.data(), options.size());
  std::memcpy(bytes.data(), &fixed, sizeof(fixed));  // header_crc32c is still 0 here
  fixed.header_crc32c = Crc32c(bytes);
  std::memcpy(bytes.data() + offsetof(FileHeader, header_crc32c), &fixed.header_crc32c,
              sizeof(fixed.header_crc32c));
  return bytes;
}

absl::StatusOr<size_t> ParseFileHeaderSize(std::string_view fixed_bytes) {
  if (fixed_bytes.size() < kFileHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset 0: file too short for an .fslog header (%d of %d bytes)",
                        fixed_bytes.size(), kFileHeaderBytes));
  }
  FileHeader fixed;
  std::memcpy(&fixed, fixed_bytes.data(), sizeof(fixed));
  if (std::memcmp(fixed.magic, kFileMagic, sizeof(kFileMagic)) != 0) {
    return absl::InvalidArgumentError("offset 0: bad magic, not an .fslog file");
  }
  if (fixed.version_major < kOldestReadableVersionMajor ||
      fixed.version_major > kFormatVersionMajor) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset %d: unknown format version %d.%d (this reader knows %d.x to %d.x)",
                        offsetof(FileHeader, version_major), fixed.version_major,
                        fixed.version_minor, kOldestReadableVersionMajor, kFormatVersionMajor));
  }
  if (fixed.record_bytes != kRecordBytes) {
    return absl::DataLossError(absl::StrFormat("offset %d: record size %d, expected %d",
                                               offsetof(FileHeader, record_bytes),
                                               fixed.record_bytes, kRecordBytes));
  }
  if (fixed.options_bytes > kMaxHeaderOptionsBytes) {
    return absl::DataLossError(absl::StrFormat("offset %d: impossible options length %d",
                                               offsetof(FileHeader, options_bytes),
                                               fixed.options_bytes));
  }
  if (fixed.header_bytes != kFileHeaderBytes + RoundUp8(fixed.options_bytes)) {
    return absl::DataLossError(absl::StrFormat(
        "offset %d: impossible header length %d for %d bytes of options",
        offsetof(FileHeader, header_bytes), fixed.header_bytes, fixed.options_bytes));
  }
  return size_t{fixed.header_bytes};
}

absl::StatusOr<FslogHeader> ParseFileHeader(std::string_view bytes) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t size, ParseFileHeaderSize(bytes));
  if (bytes.size() != size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("offset 0: header is %d bytes but %d were given", size, bytes.size()));
  }
  FileHeader fixed;
  std::memcpy(&fixed, bytes.data(), sizeof(fixed));
  const uint32_t zero = 0;
  uint32_t crc = Crc32c(bytes.data(), offsetof(FileHeader, header_crc32c));
  crc = Crc32cExtend(crc, &zero, sizeof(zero));
  const size_t after = offsetof(FileHeader, header_crc32c) + sizeof(zero);
  crc = Crc32cExtend(crc, bytes.data() + after, size - after);
  if (crc != fixed.header_crc32c) {
    return absl::DataLossError(
        absl::StrFormat("offset %d: file header CRC mismatch (stored %08x, computed %08x)",
                        offsetof(FileHeader, header_crc32c), fixed.header_crc32c, crc));
  }
  if (fixed.device_index < 0 || fixed.device_index > kMaxDeviceIndex) {
    return absl::DataLossError(
        absl::StrFormat("offset %d: device index %d is not a CUDA device ordinal (0 to %d)",
                        offsetof(FileHeader, device_index), fixed.device_index, kMaxDeviceIndex));
  }
  FslogHeader header;
  header.version_major = fixed.version_major;
  header.version_minor = fixed.version_minor;
  header.header_bytes = fixed.header_bytes;
  header.clock = static_cast<FslogClock>(fixed.clock);
  header.device_index = fixed.device_index;
  header.device_total_bytes = fixed.device_total_bytes;
  header.pid = fixed.pid;
  header.rank = fixed.rank;
  header.local_rank = fixed.local_rank;
  header.world_size = fixed.world_size;
  header.start_wall_ns = fixed.start_wall_ns;
  header.start_monotonic_ns = fixed.start_monotonic_ns;
  header.device_name = ReadField(fixed.device_name);
  header.host = ReadField(fixed.host);
  header.allocator_options.assign(bytes.data() + kFileHeaderBytes, fixed.options_bytes);
  if (fixed.header_flags & kHeaderFlagOpenMemory) {
    header.device_free_at_open_bytes = fixed.device_free_at_open;
    header.reserved_at_open_bytes = fixed.reserved_at_open;
  }
  header.zstd_chunks = (fixed.header_flags & kHeaderFlagZstdChunks) != 0;
  header.records_empty_cache = (fixed.header_flags & kHeaderFlagNoEmptyCacheRecords) == 0;
  // Sizes below 0 mean nothing; 0 is "not given".
  header.pp_size = std::max(fixed.pp_size, 0);
  header.tp_size = std::max(fixed.tp_size, 0);
  return header;
}

void SealChunk(uint32_t record_count, uint64_t first_sequence, const LogRecord* records,
               ChunkHeader* header) {
  header->magic = kChunkMagic;
  header->record_count = record_count;
  header->payload_bytes = static_cast<uint32_t>(record_count * kRecordBytes);
  header->payload_crc32c = Crc32c(records, header->payload_bytes);
  header->first_sequence = first_sequence;
  header->reserved = 0;
  header->header_crc32c = Crc32c(header, kChunkHeaderCrcCoveredBytes);
}

}  // namespace fragscope
