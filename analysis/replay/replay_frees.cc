// Replayer: frees, immediate and stream-ordered. See Note [Stream-ordered frees in a replay] in
// replay.h.
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/replay/replay.h"

namespace fragscope {
namespace {

// Whether `e`, read right after a free's free_completed, may be an event inside the next
// allocation (before its own record); most often it is the next user-level event itself.
bool MayBeInsideAnAllocation(const TraceEvent* e) {
  return e != nullptr && e->kind != EventKind::kAlloc && e->kind != EventKind::kFreeRequested &&
         e->kind != EventKind::kMarker && e->kind != EventKind::kOptionsChange;
}

}  // namespace

void Replayer::ApplyFreeRequested(const TraceEvent& event) {
  LiveBlock* found = live_.Find(event.ptr);
  if (found == nullptr) return FreeOfUnknownBlock(event);
  LiveBlock& live = *found;
  if (live.ours == 0) {  // its allocation failed in the replay
    live_.EraseFound(found);
    return;
  }
  bool deferred = false;
  const bool folded = (event.flags & kEventFlagCompletionFolded) != 0;
  if (folded) {  // the free_completed came with it: the lookahead starts past both
    deferred = MayBeInsideAnAllocation(events_.Peek(1)) && CompletedInNextLadder(live, 1);
  } else if (source_.info().records_free_completed) {
    const TraceEvent* next = events_.Peek(1);
    deferred =
        !(next != nullptr && next->kind == EventKind::kFreeCompleted && next->ptr == event.ptr) ||
        (MayBeInsideAnAllocation(events_.Peek(2)) && CompletedInNextLadder(live, 2));
    if (!deferred) skip_completion_of_ = event.ptr;
  }
  if (deferred) DeferFree(live);
  absl::Status status = allocator_->Free(live.ours);
  if (!status.ok()) FreeFailed(event, status);
  if (ABSL_PREDICT_FALSE(origins_indexed_)) {
    auto it = trace_address_of_.find(live.ours);
    if (it != trace_address_of_.end() && it->second == event.ptr) trace_address_of_.erase(it);
  }
  if (!live.origin.before_trace) phases_.Unref(live.origin.phase);
  if (!deferred) {
    live_.EraseFound(found);  // (the last use of `live`)
  } else if (folded) {
    // As ApplyFreeCompleted would. (Also when the replay stops between the halves: the pseudo-
    // stream's completion reaches the allocator only at an allocation, and none follows.)
    QueueCompletion(found);
  }
}

void Replayer::QueueCompletion(LiveBlock* live) {
  queued_completions_.push_back(live->pending_stream);
  live_.EraseFound(live);
}

void Replayer::FreeOfUnknownBlock(const TraceEvent& event) {
  Warn(absl::StrFormat(
      "event %d: free of 0x%x, which the trace never allocated (allocated before recording "
      "started?)",
      event.index, event.ptr));
}

void Replayer::FreeFailed(const TraceEvent& event, const absl::Status& status) {
  Warn(absl::StrFormat("event %d: free of 0x%x: %s", event.index, event.ptr, status.message()));
}

void Replayer::DeferFree(LiveBlock& live) {
  StreamId pseudo;
  if (!free_pseudo_streams_.empty()) {
    pseudo = free_pseudo_streams_.back();
    free_pseudo_streams_.pop_back();
  } else {
    pseudo = kFirstPseudoStream + next_pseudo_stream_++;
  }
  backend_->SetStreamBusy(pseudo, true);
  (void)allocator_->RecordStream(live.ours, pseudo);
  live.pending_stream = pseudo;
}

bool Replayer::CompletedInNextLadder(const LiveBlock& live, size_t first) {
  // The allocation's events up to its record, as CachingAllocator::Allocate writes them:
  // completions (the ladder's synchronization), segment frees and unmaps (its releases), the
  // OOM-retry empty_cache, segment allocs and maps.
  const bool records_empty_cache = source_.info().records_empty_cache;
  const TraceEvent* allocation = nullptr;
  bool went_past_cache = false;  // the trace shows the allocation was not served by the cache
  bool oom_retry = false;
  std::vector<ReleasedRange> released;
  for (size_t k = first; allocation == nullptr; ++k) {
    const TraceEvent* e = events_.Peek(k);
    if (e == nullptr) return false;
    switch (e->kind) {
      case EventKind::kFreeCompleted:
        break;
      case EventKind::kSegmentFree:
      case EventKind::kSegmentUnmap:
        // Without empty_cache records these may also be an empty_cache() called before the
        // allocation, which took that memory out of the cache before it looked.
        if (!records_empty_cache) {
          if (!config_.script_addresses) return false;  // no way to tell which blocks they were
          released.push_back({e->ptr, e->bytes});
        }
        break;
      case EventKind::kEmptyCache:
        if ((e->flags & kEventFlagOomRetry) == 0) return false;  // a user's empty_cache()
        oom_retry = went_past_cache = true;
        break;
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentMap:
        went_past_cache = true;
        break;
      case EventKind::kAlloc:
      case EventKind::kOom:
        allocation = e;
        break;
      default:
        return false;  // another user-level event first: the completion was not the ladder's
    }
  }
  if (allocation->kind == EventKind::kOom) went_past_cache = true;
  // A log that records empty_cache shows the synchronizing ladder itself.
  if (!went_past_cache || (records_empty_cache && !oom_retry)) return false;
  // Read as immediate, the block was in the cache when the allocation looked, with or without
  // the releases (the allocation's own, after it looked, or an empty_cache() before): if it
  // would have served in both cases, the reading contradicts the trace.
  if (!CacheServes(*allocation, live.ours) ||
      (!released.empty() && !CacheServes(*allocation, live.ours, released))) {
    return false;
  }
  ladder_expected_ = true;  // the completions read until the allocation are its ladder's
  return true;
}

void Replayer::ApplyFreeCompleted(const TraceEvent& event) {
  LiveBlock* live = live_.Find(event.ptr);
  if (live == nullptr || live->pending_stream == 0) return;
  QueueCompletion(live);
}

void Replayer::CompleteQueuedFreesNow() {
  for (StreamId pseudo : queued_completions_) {
    backend_->CompleteStream(pseudo);
    free_pseudo_streams_.push_back(pseudo);
  }
  queued_completions_.clear();
}

}  // namespace fragscope
