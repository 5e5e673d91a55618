#include "analysis/replay/fidelity_check.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"

namespace fragscope {
namespace {

bool IsDecision(EventKind kind) {
  switch (kind) {
    case EventKind::kAlloc:
    case EventKind::kSegmentAlloc:
    case EventKind::kSegmentFree:
    case EventKind::kSegmentMap:
    case EventKind::kSegmentUnmap:
    case EventKind::kOom:
      return true;
    default:
      return false;
  }
}

std::string DescribeDecision(EventKind kind, DevicePtr ptr, uint64_t bytes, PoolId pool) {
  const std::string in_pool =
      pool.is_default() ? "" : absl::StrCat(" in private pool ", FormatPoolId(pool));
  if (kind == EventKind::kOom) {
    return absl::StrCat(
        bytes > 0 ? absl::StrFormat("oom (rounded request %s)", FormatSize(bytes)) : "oom",
        in_pool);
  }
  if (bytes == 0) return absl::StrFormat("%s at 0x%x%s", EventKindName(kind), ptr, in_pool);
  return absl::StrFormat("%s of %s at 0x%x%s", EventKindName(kind), FormatSize(bytes), ptr,
                         in_pool);
}

}  // namespace

std::string DescribeTraceEvent(const TraceEvent& e) {
  switch (e.kind) {
    case EventKind::kMarker:
      return absl::StrFormat("event %d: marker \"%s\"", e.index, e.text);
    case EventKind::kOptionsChange:
      return absl::StrFormat("event %d: options change \"%s\"", e.index, e.text);
    case EventKind::kModel:
      return absl::StrFormat("event %d: model record (%d bytes of JSON)", e.index, e.text.size());
    case EventKind::kTag:
      return absl::StrFormat("event %d: tag 0x%x as %s", e.index, e.ptr,
                             AllocationRoleName(e.role));
    case EventKind::kOom:
      return absl::StrFormat("event %d: oom for %s (device free %s)", e.index,
                             FormatSize(e.bytes > 0 ? e.bytes : e.requested_bytes),
                             FormatSize(e.device_free_bytes));
    case EventKind::kAlloc:
    case EventKind::kFreeRequested:
    case EventKind::kFreeCompleted:
      return absl::StrFormat("event %d: %s %s at 0x%x stream %d", e.index, EventKindName(e.kind),
                             FormatSize(e.requested_bytes), e.ptr, e.stream);
    case EventKind::kEmptyCache:
      return absl::StrFormat("event %d: empty_cache%s", e.index,
                             (e.flags & kEventFlagOomRetry) ? " (OOM retry)" : "");
    default:
      return absl::StrFormat("event %d: %s of %s at 0x%x", e.index, EventKindName(e.kind),
                             FormatSize(e.bytes), e.ptr);
  }
}

void FidelityChecker::OnTraceEvent(const TraceEvent& event) {
  if (divergence_.has_value()) return;
  context_.push_back(DescribeTraceEvent(event));
  if (context_.size() > kContextEvents) context_.pop_front();
  if (!IsDecision(event.kind)) return;
  expected_.push_back({event.kind, event.kind == EventKind::kOom ? 0 : event.ptr, event.bytes,
                       (event.flags & kEventFlagSizeInferred) != 0, event.index, event.pool_id});
}

void FidelityChecker::OnAllocatorEvent(const AllocatorEvent& event) {
  if (divergence_.has_value() || !IsDecision(event.kind)) return;
  actual_.push_back({event.kind, event.ptr, event.bytes, false, 0, event.pool_id});
}

void FidelityChecker::OnOpDone(const TraceEvent& event) {
  const bool strict = event.kind == EventKind::kAlloc || event.kind == EventKind::kOom ||
                      event.kind == EventKind::kFreeRequested;
  Compare(strict, &event);
}

void FidelityChecker::Compare(bool strict, const TraceEvent* op) {
  while (!divergence_.has_value() && !expected_.empty() && !actual_.empty()) {
    const Decision e = expected_.front();
    const Decision a = actual_.front();
    const bool same =
        e.kind == a.kind && (e.ptr == 0 || e.ptr == a.ptr) && e.pool_id == a.pool_id &&
        (e.bytes == 0 || a.bytes == 0 || e.bytes == a.bytes || (e.at_least && a.bytes > e.bytes));
    if (!same) {
      Diverge(e.index, e.kind, DescribeDecision(e.kind, e.ptr, e.bytes, e.pool_id), a.kind,
              DescribeDecision(a.kind, a.ptr, a.bytes, a.pool_id));
      return;
    }
    switch (e.kind) {
      case EventKind::kAlloc:
        ++counts_.allocations;
        break;
      case EventKind::kOom:
        ++counts_.ooms;
        break;
      case EventKind::kSegmentAlloc:
        ++counts_.segment_allocs;
        ++counts_.segment_events;
        break;
      case EventKind::kSegmentFree:
        ++counts_.segment_frees;
        ++counts_.segment_events;
        break;
      case EventKind::kSegmentMap:
        ++counts_.segment_maps;
        ++counts_.segment_events;
        break;
      default:
        ++counts_.segment_unmaps;
        ++counts_.segment_events;
        break;
    }
    expected_.pop_front();
    actual_.pop_front();
  }
  if (!strict || divergence_.has_value()) return;
  if (!expected_.empty()) {
    const Decision e = expected_.front();
    Diverge(e.index, e.kind, DescribeDecision(e.kind, e.ptr, e.bytes, e.pool_id), std::nullopt,
            op != nullptr ? absl::StrFormat("nothing (the replay went on to event %d)", op->index)
                          : "nothing (end of the trace)");
  } else if (!actual_.empty()) {
    const Decision a = actual_.front();
    Diverge(op != nullptr ? op->index : 0, std::nullopt, "no allocator decision here", a.kind,
            DescribeDecision(a.kind, a.ptr, a.bytes, a.pool_id));
  }
}

void FidelityChecker::Diverge(uint64_t index, std::optional<EventKind> expected_kind,
                              std::string expected, std::optional<EventKind> got_kind,
                              std::string got) {
  Divergence d;
  d.event_index = index;
  d.expected_kind = expected_kind;
  d.got_kind = got_kind;
  d.expected = std::move(expected);
  d.got = std::move(got);
  d.context.assign(context_.begin(), context_.end());
  divergence_ = std::move(d);
}

}  // namespace fragscope
