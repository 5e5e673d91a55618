#include "analysis/replay_lookahead.h"

#include <algorithm>
#include <span>
#include <utility>

namespace fragscope {

TraceLookahead::TraceLookahead(TraceSource& source) : source_(source), storage_(kMinSlots) {
  for (TraceEvent& event : storage_) ring_.push_back(&event);
}

bool TraceLookahead::Refill() {
  if (source_done_ || !source_error_.ok()) return false;
  const size_t size = ring_.size();
  if (held_ == size) {
    // Grow, keeping the events in order from slot 0; the events themselves do not move.
    std::vector<TraceEvent*> grown;
    grown.reserve(2 * size);
    for (size_t i = 0; i < held_; ++i) grown.push_back(ring_[(head_ + i) & (size - 1)]);
    storage_.resize(2 * size);
    for (size_t i = size; i < 2 * size; ++i) grown.push_back(&storage_[i]);
    ring_ = std::move(grown);
    head_ = 0;
  }
  // The free slots from the first one to the end of the array (or to the head, if it wraps).
  const size_t first = (head_ + held_) & (ring_.size() - 1);
  const size_t count = first >= head_ ? ring_.size() - first : head_ - first;
  absl::StatusOr<size_t> got = source_.NextBatch(std::span(ring_).subspan(first, count));
  if (!got.ok()) {
    source_error_ = got.status();
    return false;
  }
  if (*got == 0) {
    source_done_ = true;
    return false;
  }
  held_ += *got;
  return true;
}

const TraceEvent* TraceLookahead::PeekSlow(size_t at) {
  while (held_ <= at) {
    if (!Refill()) return nullptr;
  }
  return &Slot(at);
}

}  // namespace fragscope
