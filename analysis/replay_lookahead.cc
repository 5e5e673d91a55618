#include "analysis/replay_lookahead.h"

#include <utility>

namespace fragscope {

TraceLookahead::TraceLookahead(TraceSource& source) : source_(source) {
  ring_.resize(2);
  for (auto& slot : ring_) slot = std::make_unique<TraceEvent>();
}

bool TraceLookahead::ReadOne() {
  if (source_done_ || !source_error_.ok()) return false;
  if (held_ == ring_.size()) {
    // Grow, keeping the events in order from slot 0; the events themselves do not move.
    std::vector<std::unique_ptr<TraceEvent>> grown(ring_.size() * 2);
    for (size_t i = 0; i < held_; ++i) {
      grown[i] = std::move(ring_[(head_ + i) & (ring_.size() - 1)]);
    }
    for (size_t i = held_; i < grown.size(); ++i) grown[i] = std::make_unique<TraceEvent>();
    ring_ = std::move(grown);
    head_ = 0;
  }
  absl::StatusOr<bool> got = source_.Next(&Slot(held_));
  if (!got.ok()) {
    source_error_ = got.status();
    return false;
  }
  if (!*got) {
    source_done_ = true;
    return false;
  }
  ++held_;
  return true;
}

const TraceEvent* TraceLookahead::PeekSlow(size_t at) {
  while (held_ <= at) {
    if (!ReadOne()) return nullptr;
  }
  return &Slot(at);
}

}  // namespace fragscope
