// TraceLookahead: a TraceSource read with lookahead, for the replay's inferences that must see
// past the event being applied (Note [Stream-ordered frees in a replay] in replay.h).
//
// Next() makes the next event current; Peek(k) shows the k-th event after the current one
// without consuming it. Events live in a ring of slots that never move (their storage is a
// deque), so the current event and every peeked one stay valid, uncopied, until the Next() call
// that passes it. The ring is refilled a batch at a time (TraceSource::NextBatch: one virtual call
// per batch, not per event), into every free slot up to the end of the ring's array. Memory:
// kMinSlots events, or the deepest lookahead asked for since construction if deeper.
//
// Errors: a source error met while reading ahead is held back until the Next() that reaches it
// (which returns nullptr, status() the error), so every event before it is still delivered, as the
// source itself would deliver them. Next() and Peek() are inline: they run once per event.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "analysis/trace_event.h"

namespace fragscope {

class TraceLookahead {
 public:
  // Ring slots at the start (a power of two): batches of up to this many events.
  static constexpr size_t kMinSlots = 64;

  // REQUIRES: `source` outlives this object and is read only through it.
  explicit TraceLookahead(TraceSource& source);

  // The next event; nullptr at the end or on a source error (then status() says which). The
  // previous current event is released.
  TraceEvent* Next() {
    if (has_current_) {
      head_ = (head_ + 1) & (ring_.size() - 1);
      --held_;
      has_current_ = false;
    }
    if (held_ == 0 && !Refill()) return nullptr;
    has_current_ = true;
    return ring_[head_];
  }
  // The source's error once Next() has returned nullptr for it; OK at the end of the trace.
  const absl::Status& status() const { return source_error_; }

  // The k-th event after the current one (k >= 1); nullptr if the trace ends or fails first.
  const TraceEvent* Peek(size_t k) {
    const size_t at = (has_current_ ? 1 : 0) + k - 1;
    return held_ > at ? &Slot(at) : PeekSlow(at);
  }

 private:
  // Reads more events into the free slots (growing the ring when it is full). False when none
  // came: at the end of the source or on an error (kept in source_error_).
  bool Refill();
  const TraceEvent* PeekSlow(size_t at);
  TraceEvent& Slot(size_t i) { return *ring_[(head_ + i) & (ring_.size() - 1)]; }

  TraceSource& source_;
  std::deque<TraceEvent> storage_;  // the events; a deque never moves them as it grows
  // Slots [head_, head_ + held_) modulo the size (a power of two): the current event (if
  // has_current_) and then the lookahead. Each points into storage_.
  std::vector<TraceEvent*> ring_;
  size_t head_ = 0;
  size_t held_ = 0;
  bool has_current_ = false;
  bool source_done_ = false;
  absl::Status source_error_;
};

}  // namespace fragscope
