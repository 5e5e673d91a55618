#include "analysis/report/fslog_file_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope {

absl::StatusOr<std::unique_ptr<FslogFileWriter>> FslogFileWriter::Open(const std::string& path,
                                                                       FslogHeader header) {
  if (header.clock == FslogClock::kUnknown) header.clock = FslogClock::kMonotonic;
  auto writer = std::unique_ptr<FslogFileWriter>(new FslogFileWriter());
  writer->path_ = path;
  writer->device_ = header.device_index;
  writer->base_ns_ = header.start_monotonic_ns;
  writer->file_ = std::fopen(path.c_str(), "wb");
  if (writer->file_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create: %s", path, std::strerror(errno)));
  }
  const std::string bytes = SerializeFileHeader(header);
  if (std::fwrite(bytes.data(), 1, bytes.size(), writer->file_) != bytes.size()) {
    return absl::DataLossError(absl::StrFormat("%s: write failed: %s", path, std::strerror(errno)));
  }
  writer->chunk_.reserve(kMaxChunkRecords);
  return writer;
}

FslogFileWriter::~FslogFileWriter() { (void)Close(); }

LogRecord* FslogFileWriter::Reserve(size_t n) {
  if (chunk_.size() + n > kMaxChunkRecords) FlushChunk();
  if (chunk_.empty()) chunk_first_ = sequence_;
  chunk_.resize(chunk_.size() + n);
  sequence_ += n;
  return &chunk_[chunk_.size() - n];
}

void FslogFileWriter::FlushChunk() {
  if (chunk_.empty() || file_ == nullptr) return;
  ChunkHeader header;
  SealChunk(static_cast<uint32_t>(chunk_.size()), chunk_first_, chunk_.data(), &header);
  const size_t payload = chunk_.size() * sizeof(LogRecord);
  if (std::fwrite(&header, sizeof(header), 1, file_) != 1 ||
      std::fwrite(chunk_.data(), 1, payload, file_) != payload) {
    if (!failed_) error_ = errno;
    failed_ = true;
  }
  chunk_.clear();
}

void FslogFileWriter::Append(const AllocatorEvent& event, uint64_t timestamp_ns) {
  ++events_;
  // Note [Combined free records], when the free_completed also has its free_requested's time.
  if (event.kind == EventKind::kFreeCompleted && !chunk_.empty() &&
      chunk_.back().timestamp_ns == base_ns_ + timestamp_ns &&
      CanCombineFree(chunk_.back(), event)) {
    CombineFree(event, &chunk_.back());
    return;
  }
  if (event.kind == EventKind::kOom && alloc_context_ != 0) {
    LogRecord pair[2];
    EncodeOomContext(alloc_context_, base_ns_ + timestamp_ns, device_, &pair[0]);
    EncodeEvent(event, base_ns_ + timestamp_ns, &pair[1]);
    AppendRaw(pair, 2);
    return;
  }
  LogRecord* record = Reserve(1);
  EncodeEvent(event, base_ns_ + timestamp_ns, record);
  if (event.kind == EventKind::kAlloc) record->words[kWordAllocContext] = alloc_context_;
}

void FslogFileWriter::DefineString(uint32_t id, std::string_view text, uint64_t timestamp_ns) {
  LogRecord records[kMaxStringRecords];
  AppendRaw(records, EncodeString(id, text, base_ns_ + timestamp_ns, device_, records));
}

void FslogFileWriter::AppendRaw(const LogRecord* records, size_t n) {
  std::memcpy(static_cast<void*>(Reserve(n)), records, n * sizeof(LogRecord));
}

void FslogFileWriter::DefineContext(const ContextDefinition& context, uint64_t timestamp_ns) {
  EncodeContext(context, base_ns_ + timestamp_ns, device_, Reserve(1));
}

void FslogFileWriter::AppendState(std::span<const InitialSegment> segments) {
  FRAGSCOPE_CHECK(sequence_ == 0);
  for (const InitialSegment& seg : segments) {
    EncodeStateRecord(kRecordKindStateSegment, seg.address, seg.size, 0, seg.stream, seg.address,
                      seg.pool, device_, base_ns_, Reserve(1));
    for (const InitialBlock& block : seg.allocated) {
      EncodeStateRecord(kRecordKindStateBlock, block.address, block.size, block.requested_bytes,
                        seg.stream, seg.address, seg.pool, device_, base_ns_, Reserve(1));
    }
  }
}

void FslogFileWriter::Mark(std::string_view text, uint64_t timestamp_ns) {
  ++events_;
  EncodeMarker(text, 0, base_ns_ + timestamp_ns, Reserve(1));
}

void FslogFileWriter::Tag(DevicePtr ptr, AllocationRole role, uint64_t timestamp_ns,
                          uint32_t context) {
  ++events_;
  LogRecord* record = Reserve(1);
  EncodeTag(ptr, static_cast<uint8_t>(role), base_ns_ + timestamp_ns, device_, record);
  record->words[kWordTagContext] = context;
}

void FslogFileWriter::OptionsChange(std::string_view options, uint64_t timestamp_ns) {
  LogRecord records[kMaxOptionsChangeRecords];
  AppendRecords(records, EncodeOptionsChange(options, base_ns_ + timestamp_ns, 0, records));
}

void FslogFileWriter::RecordModel(std::string_view json, uint64_t timestamp_ns) {
  LogRecord records[kMaxOptionsChangeRecords];
  AppendRecords(records, EncodeModel(json, base_ns_ + timestamp_ns, 0, records));
}

void FslogFileWriter::AppendRecords(const LogRecord* records, size_t n) {
  ++events_;
  std::memcpy(static_cast<void*>(Reserve(n)), records, n * sizeof(LogRecord));
}

absl::Status FslogFileWriter::Close() {
  if (file_ != nullptr) {
    FlushChunk();
    if (std::fclose(file_) != 0 && !failed_) {
      error_ = errno;
      failed_ = true;
    }
    file_ = nullptr;
  }
  return failed_ ? absl::DataLossError(
                       absl::StrFormat("%s: write failed: %s", path_, std::strerror(error_)))
                 : absl::OkStatus();
}

}  // namespace fragscope
