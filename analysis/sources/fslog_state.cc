#include "analysis/sources/fslog_state.h"

#include <algorithm>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fragscope {
namespace {

// Checks one state record against the state read so far and adds it to `segments`; an error
// message (without the log's name and offset) if it breaks Note [State records].
std::string AddStateRecord(const LogRecord& r, int32_t device,
                           std::vector<InitialSegment>* segments) {
  const uint64_t* w = r.words;
  const DevicePtr ptr = w[kWordPtr];
  const uint64_t bytes = w[kWordBytes];
  const std::string_view kind = RecordKindName(r.kind);
  if (r.device != device) {
    return absl::StrFormat("%s on device %d, but the log header says device %d", kind, r.device,
                           device);
  }
  if (r.pool > static_cast<uint8_t>(PoolKind::kLarge)) {
    return absl::StrFormat("%s with pool %d (0 small, 1 large)", kind, r.pool);
  }
  if (bytes == 0 || ptr + bytes < ptr) {
    return absl::StrFormat(
        "%s at 0x%x of %d bytes (a size of 0, or past the end of the address "
        "space)",
        kind, ptr, bytes);
  }
  if (r.kind == kRecordKindStateSegment) {
    InitialSegment& seg = segments->emplace_back();
    seg.address = ptr;
    seg.size = bytes;
    seg.pool = static_cast<PoolKind>(r.pool);
    seg.stream = w[kWordStream];
    return "";
  }
  if (segments->empty()) return "state_block before any state_segment";
  InitialSegment& seg = segments->back();
  if (w[kWordSegment] != seg.address) {
    return absl::StrFormat(
        "state_block at 0x%x names segment 0x%x, but follows the segment at 0x%x", ptr,
        w[kWordSegment], seg.address);
  }
  if (ptr < seg.address || ptr + bytes > seg.address + seg.size) {
    return absl::StrFormat("state_block [0x%x, 0x%x) lies outside its segment [0x%x, 0x%x)", ptr,
                           ptr + bytes, seg.address, seg.address + seg.size);
  }
  if (!seg.allocated.empty()) {
    const InitialBlock& last = seg.allocated.back();
    if (ptr < last.address + last.size) {
      return absl::StrFormat(
          "state_block at 0x%x overlaps or precedes the block [0x%x, 0x%x) "
          "before it (blocks come in address order)",
          ptr, last.address, last.address + last.size);
    }
  }
  if (w[kWordRequestedBytes] > bytes) {
    return absl::StrFormat("state_block at 0x%x requests %d bytes, more than its %d", ptr,
                           w[kWordRequestedBytes], bytes);
  }
  if (w[kWordStream] != seg.stream) {
    return absl::StrFormat("state_block at 0x%x is on stream %d, its segment on stream %d", ptr,
                           w[kWordStream], seg.stream);
  }
  seg.allocated.push_back(InitialBlock{ptr, bytes, w[kWordRequestedBytes]});
  return "";
}

}  // namespace

absl::StatusOr<std::vector<InitialSegment>> ReadFslogState(FslogReader& reader) {
  std::vector<InitialSegment> segments;
  const int32_t device = reader.header().device_index;
  for (;;) {
    const uint64_t chunk_offset = reader.offset();
    absl::StatusOr<std::span<const LogRecord>> chunk = reader.NextChunk();
    if (!chunk.ok()) return chunk.status();
    if (chunk->empty()) break;
    size_t i = 0;
    for (; i < chunk->size() && IsStateRecord((*chunk)[i].kind); ++i) {
      const std::string problem = AddStateRecord((*chunk)[i], device, &segments);
      if (!problem.empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: bad state record at file offset %d: %s", reader.name(),
                            chunk_offset + kChunkHeaderBytes + i * kRecordBytes, problem));
      }
    }
    if (i < chunk->size()) break;
  }
  std::vector<const InitialSegment*> by_address;
  by_address.reserve(segments.size());
  for (const InitialSegment& seg : segments) by_address.push_back(&seg);
  std::sort(
      by_address.begin(), by_address.end(),
      [](const InitialSegment* a, const InitialSegment* b) { return a->address < b->address; });
  for (size_t i = 1; i < by_address.size(); ++i) {
    const InitialSegment& a = *by_address[i - 1];
    const InitialSegment& b = *by_address[i];
    if (b.address < a.address + a.size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: bad state records: the segments [0x%x, 0x%x) and [0x%x, 0x%x) overlap",
          reader.name(), a.address, a.address + a.size, b.address, b.address + b.size));
    }
  }
  return segments;
}

}  // namespace fragscope
