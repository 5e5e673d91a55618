#include "analysis/replay/replay_lookahead.h"

#include <algorithm>
#include <span>
#include <utility>

namespace fragscope {

TraceLookahead::TraceLookahead(TraceSource& source)
    : source_(source), storage_(kMinSlots), mask_(kMinSlots - 1), head_(kMinSlots - 1) {
  for (TraceEvent& event : storage_) ring_.push_back(&event);
}

TraceEvent* TraceLookahead::NextSlow() {
  const size_t first = (head_ + 1) & mask_;
  if (!Fill(first, ring_.size() - first)) return nullptr;
  head_ = first;
  --held_;
  return ring_[head_];
}

const TraceEvent* TraceLookahead::PeekSlow(size_t k) {
  while (held_ < k) {
    const size_t size = ring_.size();
    if (held_ == size - 1) {
      // Grow, keeping the current slot and the lookahead in order from slot 0; the events
      // themselves do not move.
      std::vector<TraceEvent*> grown;
      grown.reserve(2 * size);
      for (size_t i = 0; i < size; ++i) grown.push_back(ring_[(head_ + i) & mask_]);
      storage_.resize(2 * size);
      for (size_t i = size; i < 2 * size; ++i) grown.push_back(&storage_[i]);
      ring_ = std::move(grown);
      mask_ = 2 * size - 1;
      head_ = 0;
    }
    // The free slots after the lookahead, to the end of the array or, if they wrap, to the
    // current slot.
    const size_t first = (head_ + held_ + 1) & mask_;
    if (!Fill(first, first > head_ ? ring_.size() - first : head_ - first)) return nullptr;
  }
  return ring_[(head_ + k) & mask_];
}

bool TraceLookahead::Fill(size_t first, size_t count) {
  if (source_done_ || !source_error_.ok()) return false;
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

}  // namespace fragscope
