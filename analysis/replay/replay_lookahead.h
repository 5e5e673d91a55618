// TraceLookahead: a TraceSource read with lookahead, for the replay's inferences that must see
// past the event being applied (Note [Stream-ordered frees in a replay] in replay.h).
//
// Next() makes the next event current; Peek(k) shows the k-th event after the current one
// without consuming it. Events live in a ring of slots that never move (their storage is a
// deque), so the current event and every peeked one stay valid, uncopied, until the Next() call
// that passes it. The ring is refilled a batch at a time (TraceSource::NextBatch: one virtual call
// per batch, not per event), into every free slot up to the end of the ring's array. Memory:
// kMinSlots events (the current one and up to kMinSlots - 1 ahead), or the slots the deepest
// lookahead asked for since construction needed, rounded up to a power of two.
//
// Errors: a source error met while reading ahead is held back until the Next() that reaches it
// (which returns nullptr, status() the error), so every event before it is still delivered, as the
// source itself would deliver them. Next() and Peek() are inline: they run once per event.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "analysis/sources/trace_event.h"

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
    if (held_ == 0) return NextSlow();
    head_ = (head_ + 1) & mask_;
    --held_;
    return ring_[head_];
  }
  // The source's error once Next() has returned nullptr for it; OK at the end of the trace.
  const absl::Status& status() const { return source_error_; }

  // The k-th event after the current one (k >= 1; before the first Next(), the k-th event);
  // nullptr if the trace ends or fails first.
  const TraceEvent* Peek(size_t k) { return held_ >= k ? ring_[(head_ + k) & mask_] : PeekSlow(k); }

 private:
  // Next() with nothing read ahead: the current event is released, so every slot from the next
  // one to the end of the array takes the batch.
  TraceEvent* NextSlow();
  // Peek() past what was read: more events into the free slots after the lookahead, keeping the
  // current one (growing the ring when it is full).
  const TraceEvent* PeekSlow(size_t k);
  // Reads a batch into the `count` slots from `first` on. False when none came: at the end of
  // the source or on an error (kept in source_error_).
  bool Fill(size_t first, size_t count);

  TraceSource& source_;
  std::deque<TraceEvent> storage_;  // the events; a deque never moves them as it grows
  // The slots, each pointing into storage_, a power of two of them (mask_ + 1). Slot head_ holds
  // the current event (before the first Next(), no event: head_ is the last slot), and slots
  // head_ + 1 ... head_ + held_ (modulo the size) the lookahead; the others are free.
  std::vector<TraceEvent*> ring_;
  size_t mask_ = 0;
  size_t head_ = 0;
  size_t held_ = 0;
  bool source_done_ = false;
  absl::Status source_error_;
};

}  // namespace fragscope
