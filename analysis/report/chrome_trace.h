// ChromeTraceWriter: a replay as Chrome trace-event JSON, for Perfetto (ui.perfetto.dev) and
// chrome://tracing: a "memory" counter track with allocated, active and reserved bytes, one
// instant event per marker (the phase) and per OOM (with the request and cause numbers).
//
// One record a line, in DumpJson's one-line layout (estimator/json_document.h): the records are
// nlohmann/json objects, except the counter samples (chrome_trace.cc says why).
// Streaming: events are written as the replay produces them; counter samples that fall in the
// same microsecond are coalesced (the last one wins), so the output stays proportional to the
// trace's duration rather than its event count. Traces without times (RMM CSV rows in the same
// microsecond) still get one sample per distinct timestamp.
#pragma once

#include <cstdint>
#include <ostream>

#include "allocator/stats_tracker.h"
#include "analysis/replay/replay.h"
#include "estimator/json_document.h"

namespace fragscope {

class ChromeTraceWriter final : public ReplayHooks {
 public:
  // REQUIRES: replayer.Init() has run; `out` outlives the writer.
  ChromeTraceWriter(Replayer& replayer, std::ostream& out);

  uint32_t callbacks() const override { return kHookAll & ~kHookStop; }
  void OnTraceEvent(const TraceEvent& event) override;
  void OnAllocatorEvent(const AllocatorEvent& event) override { tracker_.OnEvent(event); }
  void OnOpDone(const TraceEvent& event) override;
  void OnOom(const ReplayOom& oom) override;
  void OnFinish() override;
  uint64_t events_written() const { return written_; }
  // Writes only what trace events from `first` on do (the counters still count every event
  // before: they are the allocator's figures then). The replay's stop_after_index ends the range.
  void set_first_index(uint64_t first) { first_index_ = first; }

 private:
  // One element of "traceEvents", on a line of its own.
  void Write(const estimator::OrderedJson& event);
  void WriteCounter();

  std::ostream& out_;
  StatsTracker tracker_;
  int pid_ = 0;
  bool have_pending_ = false;
  uint64_t pending_us_ = 0;
  uint64_t written_ = 0;
  uint64_t first_index_ = 0;
};

}  // namespace fragscope
