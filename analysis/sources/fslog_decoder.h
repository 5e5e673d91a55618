// FslogSource::Decoder: the records of one .fslog chunk as TraceEvents, on whichever thread
// decodes (the consumer, or the reader thread of Note [Reading on a background thread] in
// fslog_source.h). Private to FslogSource; its own file so that the decoding of records and the
// reading around it are read apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "analysis/sources/fslog_source.h"
#include "analysis/sources/trace_event.h"
#include "fslog/fslog_context.h"
#include "fslog/fslog_format.h"

namespace fragscope {

// Turns the records of one chunk into TraceEvents: folds options-change continuations, passes
// over kinds from newer minor versions, rebases times on the log's start, refuses other devices.
// Used by one thread at a time (the consumer, or the reader thread).
class FslogSource::Decoder {
 public:
  Decoder(std::string name, int32_t device, uint64_t start_monotonic_ns, bool combined_frees,
          bool fold_completions, bool alloc_contexts, FslogContexts* contexts)
      : name_(std::move(name)),
        device_(device),
        time_base_ns_(start_monotonic_ns),
        have_time_base_(start_monotonic_ns > 0),
        combined_frees_(combined_frees),
        fold_completions_(fold_completions),
        alloc_contexts_(alloc_contexts),
        contexts_(contexts) {}

  void SetChunk(std::span<const LogRecord> chunk, uint64_t first_sequence) {
    chunk_ = chunk;
    first_sequence_ = first_sequence;
    pos_ = 0;
    pending_completion_ = nullptr;
  }

  // The chunk's next event into *event; false when the chunk has no more or on an error (then
  // error() says which: mixed devices).
  bool Next(TraceEvent* event);
  const absl::Status& error() const { return error_; }

 private:
  // Next's rare cases, out of line: a marker's or options change's text (record `i` of the
  // chunk, then its continuations); the error for a record of another device (returns false).
  bool DecodeText(const LogRecord& r, size_t i, TraceEvent* event);
  bool FailMixedDevices(const LogRecord& r, const TraceEvent& event);
  bool FailLateState(const LogRecord& r, size_t i);
  bool FailStrayOomContext(const LogRecord& r, size_t i);
  // A string or context record (Note [Context records]): defines it; false on an error.
  bool Define(const LogRecord& r, size_t i);
  // The context record `record` (of kind `kind`) names by `id`, into *context; false (the error)
  // for an id no earlier record defines.
  bool FindContext(uint64_t id, std::string_view kind, uint64_t record,
                   const BlockContext** context);

  std::string name_;
  int32_t device_;
  uint64_t time_base_ns_;
  bool have_time_base_;
  bool combined_frees_;    // format 2.0 or later: Note [Combined free records]
  bool fold_completions_;  // a combined record is one event (kEventFlagCompletionFolded)
  std::span<const LogRecord> chunk_;
  uint64_t first_sequence_ = 0;
  size_t pos_ = 0;
  // A combined free whose free_requested half Next() returned last: the free_completed is next.
  const LogRecord* pending_completion_ = nullptr;
  uint64_t combined_before_ = 0;  // combined free records whose second event was delivered
  bool past_state_ = false;       // a record other than a state record was seen
  bool alloc_contexts_;           // format 2.6 or later: an alloc's word 6 is its context
  FslogContexts* contexts_;       // the log's strings and contexts (Note [Context records])
  // The context an oom_context record gave the oom record that must come next, and its number.
  const BlockContext* oom_context_ = nullptr;
  uint64_t oom_context_record_ = 0;
  absl::Status error_;
};

}  // namespace fragscope
