#include "hooks/native_trace_converter.h"

#include <algorithm>
#include <utility>

#include "allocator/size_policy.h"

namespace fragscope::hooks {
namespace {

uint64_t SaturatingSub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

NativeTraceConverter::NativeTraceConverter(AllocatorOptions options, uint64_t device_total_bytes)
    : options_(std::move(options)), device_total_bytes_(device_total_bytes) {}

void NativeTraceConverter::FillSegment(const NativeTraceEntry& entry, bool expandable,
                                       AllocatorEvent* event) const {
  event->ptr = entry.addr;
  event->bytes = entry.size;
  if (expandable) {
    // Mappings come in pages of the pool's granule: large_segment_size or 2 MiB (a guess for
    // sizes that are multiples of both).
    event->flags |= kEventFlagExpandable;
    event->pool =
        entry.size % options_.large_segment_size_bytes == 0 ? PoolKind::kLarge : PoolKind::kSmall;
    return;
  }
  event->pool = entry.size <= kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge;
  if (options_.max_split_size_set() && entry.size >= options_.max_split_size_bytes) {
    event->flags |= kEventFlagOversize;
  }
}

void NativeTraceConverter::FillBlockEvent(EventKind kind, const NativeTraceEntry& entry,
                                          AllocatorEvent* event) const {
  const uint64_t rounded = entry.size == 0 ? 0 : RoundSize(entry.size, options_);
  uint8_t flags = kEventFlagSizeInferred;
  if (options_.max_split_size_set() && rounded >= options_.max_split_size_bytes &&
      kind != EventKind::kFreeCompleted) {
    flags |= kEventFlagOversize;
  }
  // Every field stored once, in place: zero-initializing the whole struct first compiles to
  // `rep stos`, and a temporary copied into *event reloads its fresh narrow stores as 16-byte
  // loads (store-forwarding stalls); bench/event_log_benchmark BM_ObservedNativePairBurst.
  event->kind = kind;
  event->pool = PoolFor(rounded);
  event->flags = flags;
  event->merged_count = 0;
  event->device = entry.device;
  event->ptr = entry.addr;
  event->bytes = rounded;
  event->requested_bytes = entry.size;
  event->stream = entry.stream;
  event->segment = 0;  // Note [No segment in observed block events]
  event->split_bytes = 0;
  event->result_bytes = 0;
  event->device_free_bytes = 0;
  event->device_total_bytes = 0;
  event->reserved_bytes = 0;
  event->allocated_bytes = 0;
}

bool NativeTraceConverter::Convert(const NativeTraceEntry& entry, AllocatorEvent* event) {
  switch (entry.action) {  // the block events, one per allocation or free
    case NativeTraceAction::kAlloc:
      FillBlockEvent(EventKind::kAlloc, entry, event);
      allocated_bytes_ += event->bytes;
      return true;
    case NativeTraceAction::kFreeRequested:
      FillBlockEvent(EventKind::kFreeRequested, entry, event);
      allocated_bytes_ = SaturatingSub(allocated_bytes_, event->bytes);
      return true;
    case NativeTraceAction::kFreeCompleted:
      FillBlockEvent(EventKind::kFreeCompleted, entry, event);
      return true;
    default:
      break;
  }
  *event = AllocatorEvent{};
  event->device = entry.device;
  event->stream = entry.stream;
  switch (entry.action) {
    case NativeTraceAction::kSegmentAlloc:
    case NativeTraceAction::kSegmentMap: {
      const bool map = entry.action == NativeTraceAction::kSegmentMap;
      event->kind = map ? EventKind::kSegmentMap : EventKind::kSegmentAlloc;
      FillSegment(entry, map, event);
      reserved_bytes_ += entry.size;
      return true;
    }
    case NativeTraceAction::kSegmentFree:
    case NativeTraceAction::kSegmentUnmap: {
      const bool unmap = entry.action == NativeTraceAction::kSegmentUnmap;
      event->kind = unmap ? EventKind::kSegmentUnmap : EventKind::kSegmentFree;
      FillSegment(entry, unmap, event);
      reserved_bytes_ = SaturatingSub(reserved_bytes_, entry.size);
      return true;
    }
    case NativeTraceAction::kOom:
      event->kind = EventKind::kOom;
      event->pool = PoolFor(entry.size);
      event->bytes = entry.size;
      event->requested_bytes = entry.size;
      event->device_free_bytes = entry.addr;
      event->device_total_bytes = device_total_bytes_;
      event->reserved_bytes = reserved_bytes_;
      event->allocated_bytes = allocated_bytes_;
      if (SaturatingSub(reserved_bytes_, allocated_bytes_) >= entry.size) {
        event->flags |= kEventFlagWouldFitIfContiguous;
      }
      return true;
    default:  // snapshot, unknown; the block events are above
      break;
  }
  return false;
}

}  // namespace fragscope::hooks
