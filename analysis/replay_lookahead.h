// TraceLookahead: a TraceSource read with lookahead, for the replay's inferences that must see
// past the event being applied (Note [Stream-ordered frees in a replay] in replay.h).
//
// Next() makes the next event current; Peek(k) shows the k-th event after the current one
// without consuming it. Events live in a ring of heap-allocated slots that never move, so the
// current event and every peeked one stay valid, uncopied, until the Next() call that passes
// them. Memory: the deepest lookahead asked for since construction (one event in most traces).
//
// Errors: a source error met while peeking is held back until the Next() that reaches it (which
// returns nullptr, status() the error), so every event before it is still delivered, as the
// source itself would deliver them. Next() and Peek() are inline: they run once per event.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "analysis/trace_event.h"

namespace fragscope {

class TraceLookahead {
 public:
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
    if (held_ == 0 && !ReadOne()) return nullptr;
    has_current_ = true;
    return ring_[head_].get();
  }
  // The source's error once Next() has returned nullptr for it; OK at the end of the trace.
  const absl::Status& status() const { return source_error_; }

  // The k-th event after the current one (k >= 1); nullptr if the trace ends or fails first.
  const TraceEvent* Peek(size_t k) {
    const size_t at = (has_current_ ? 1 : 0) + k - 1;
    return held_ > at ? &Slot(at) : PeekSlow(at);
  }

 private:
  // Reads one more event into the ring. False at the end of the source or on an error (kept in
  // source_error_).
  bool ReadOne();
  const TraceEvent* PeekSlow(size_t at);
  TraceEvent& Slot(size_t i) { return *ring_[(head_ + i) & (ring_.size() - 1)]; }

  TraceSource& source_;
  // Slots [head_, head_ + held_) modulo the size (a power of two): the current event (if
  // has_current_) and then the lookahead.
  std::vector<std::unique_ptr<TraceEvent>> ring_;
  size_t head_ = 0;
  size_t held_ = 0;
  bool has_current_ = false;
  bool source_done_ = false;
  absl::Status source_error_;
};

}  // namespace fragscope
