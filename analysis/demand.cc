#include "analysis/demand.h"

#include <algorithm>

#include "allocator/allocator_options.h"
#include "allocator/size_policy.h"

namespace fragscope {

uint64_t DemandBytes(const TraceEvent& event) {
  static const AllocatorOptions kDefaults;
  if (event.requested_bytes > 0) return RoundSize(event.requested_bytes, kDefaults);
  return event.bytes;
}

DemandCollector::DemandCollector(const TraceInfo& info) {
  for (const InitialSegment& segment : info.initial_segments) {
    for (const InitialBlock& block : segment.allocated) {
      const uint64_t bytes = block.requested_bytes > 0
                                 ? RoundSize(block.requested_bytes, AllocatorOptions())
                                 : block.size;
      live_blocks_[block.address] = bytes;
      live_ += bytes;
    }
  }
  summary_.peak.bytes = live_;
  if (info.device_free_at_open_bytes.has_value() && info.capacity_bytes > 0) {
    const uint64_t held = *info.device_free_at_open_bytes + info.reserved_at_open_bytes;
    summary_.outside_bytes = info.capacity_bytes > held ? info.capacity_bytes - held : 0;
  }
}

void DemandCollector::Raise(uint64_t bytes, const TraceEvent& event, bool refused) {
  if (bytes <= summary_.peak.bytes) return;
  summary_.peak = {.bytes = bytes,
                   .event_index = event.index,
                   .time_ns = event.time_ns,
                   .phase = phase_,
                   .refused_request = refused};
}

void DemandCollector::OnTraceEvent(const TraceEvent& event) {
  switch (event.kind) {
    case EventKind::kAlloc: {
      const uint64_t bytes = DemandBytes(event);
      auto [it, inserted] = live_blocks_.try_emplace(event.ptr, bytes);
      if (!inserted) {  // an address allocated twice: the trace lost its free; the later counts
        live_ -= it->second;
        it->second = bytes;
      }
      live_ += bytes;
      Raise(live_, event, false);
      break;
    }
    case EventKind::kFreeRequested: {
      auto it = live_blocks_.find(event.ptr);
      if (it == live_blocks_.end()) break;  // a free of what the trace never allocated
      live_ -= it->second;
      live_blocks_.erase(it);
      break;
    }
    case EventKind::kOom: {
      ++summary_.refused_requests;
      Raise(live_ + DemandBytes(event), event, true);
      if (event.device_total_bytes > 0) {
        const uint64_t held = event.device_free_bytes + event.reserved_bytes;
        if (event.device_total_bytes > held) {
          summary_.outside_bytes =
              std::max(summary_.outside_bytes, event.device_total_bytes - held);
        }
      }
      break;
    }
    case EventKind::kMarker:
      phase_ = event.text;
      break;
    default:
      break;
  }
}

}  // namespace fragscope
