// Replayer: frees, immediate and stream-ordered. See Note [Stream-ordered frees in a replay] in
// replay.h.
#include "absl/strings/str_format.h"
#include "analysis/replay.h"

namespace fragscope {

void Replayer::ApplyFreeRequested(const TraceEvent& event) {
  auto it = live_.find(event.ptr);
  if (it == live_.end()) {
    Warn(
        absl::StrFormat("event %d: free of 0x%x, which the trace never allocated (allocated "
                        "before recording started?)",
                        event.index, event.ptr));
    return;
  }
  LiveBlock& live = it->second;
  if (live.ours == 0) {  // its allocation failed in the replay
    live_.erase(it);
    return;
  }
  bool deferred = false;
  if (source_.info().records_free_completed) {
    const TraceEvent* next = events_.Peek(1);
    deferred =
        !(next != nullptr && next->kind == EventKind::kFreeCompleted && next->ptr == event.ptr);
    if (!deferred) skip_completion_of_ = event.ptr;
  }
  if (deferred) {
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
  absl::Status status = allocator_->Free(live.ours);
  if (!status.ok()) {
    Warn(absl::StrFormat("event %d: free of 0x%x: %s", event.index, event.ptr, status.message()));
  }
  if (!live.origin.before_trace) phases_.Unref(live.origin.phase);
  if (!deferred) live_.erase(it);
}

void Replayer::ApplyFreeCompleted(const TraceEvent& event) {
  auto it = live_.find(event.ptr);
  if (it == live_.end() || it->second.pending_stream == 0) return;
  queued_completions_.push_back(it->second.pending_stream);
  live_.erase(it);
}

void Replayer::CompleteQueuedFrees() {
  for (StreamId pseudo : queued_completions_) {
    backend_->CompleteStream(pseudo);
    free_pseudo_streams_.push_back(pseudo);
  }
  queued_completions_.clear();
}

}  // namespace fragscope
