#include "hooks/native_trace_converter.h"

#include <algorithm>
#include <utility>

#include "allocator/size_policy.h"

namespace fragscope::hooks {

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

bool NativeTraceConverter::ConvertSegmentOrOom(const NativeTraceEntry& entry,
                                               AllocatorEvent* event) {
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
