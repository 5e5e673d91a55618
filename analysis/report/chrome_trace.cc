#include "analysis/report/chrome_trace.h"

#include "absl/strings/str_format.h"

namespace fragscope {

using estimator::OrderedJson;

ChromeTraceWriter::ChromeTraceWriter(Replayer& replayer, std::ostream& out) : out_(out) {
  tracker_.Assign(replayer.allocator().GetStats());
  pid_ = replayer.info().rank;
  out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  Write({{"name", "process_name"},
         {"ph", "M"},
         {"pid", pid_},
         {"args",
          {{"name", absl::StrFormat("fragscope: %s (device %d)", replayer.info().path,
                                    replayer.info().device)}}}});
}

void ChromeTraceWriter::Write(const OrderedJson& event) {
  if (written_ > 0) out_ << ",\n";
  out_ << estimator::DumpJson(event, -1);
  ++written_;
}

// The one record written per distinct microsecond, so the bulk of a large trace's output: formatted
// here, in DumpJson's one-line layout, rather than built as an nlohmann object and dumped. A
// convert of 5 M events (1.3 M counters) took 5x the CPU time that way, and a whole document
// built first held ~0.8 KB per record (bench/RESULTS.md, "Chrome trace export"). It holds only
// numbers: nothing to escape.
void ChromeTraceWriter::WriteCounter() {
  const DeviceStats s = tracker_.stats();
  out_ << absl::StrFormat(
      ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%d,\"pid\":%d,\"args\":{\"allocated\":%d,"
      "\"active\":%d,\"reserved\":%d}}",
      pending_us_, pid_, s.allocated_bytes[0].current, s.active_bytes[0].current,
      s.reserved_bytes[0].current);
  ++written_;
}

void ChromeTraceWriter::OnTraceEvent(const TraceEvent& event) {
  const uint64_t us = event.time_ns / 1000;
  if (have_pending_ && us != pending_us_) {
    WriteCounter();
    have_pending_ = false;
  }
  if (event.kind == EventKind::kMarker && event.index >= first_index_) {
    Write({{"name", event.text},
           {"cat", "marker"},
           {"ph", "i"},
           {"s", "p"},
           {"ts", us},
           {"pid", pid_},
           {"tid", 0}});
  }
}

void ChromeTraceWriter::OnOpDone(const TraceEvent& event) {
  if (event.index < first_index_) return;
  pending_us_ = event.time_ns / 1000;
  have_pending_ = true;
}

void ChromeTraceWriter::OnOom(const ReplayOom& oom) {
  const TraceEvent& e = *oom.event;
  if (e.index < first_index_) return;
  Write({{"name", "OOM"},
         {"cat", "oom"},
         {"ph", "i"},
         {"s", "g"},
         {"ts", e.time_ns / 1000},
         {"pid", pid_},
         {"tid", 0},
         {"args",
          {{"event", e.index},
           {"requested_bytes", e.requested_bytes > 0 ? e.requested_bytes : e.bytes},
           {"in_trace", oom.in_trace},
           {"in_replay", oom.in_replay},
           {"reserved_bytes", oom.report.reserved_bytes},
           {"allocated_bytes", oom.report.allocated_bytes},
           {"largest_free_block_bytes", oom.report.largest_free_cached_block}}}});
}

void ChromeTraceWriter::OnFinish() {
  if (have_pending_) WriteCounter();
  have_pending_ = false;
  out_ << "\n]}\n";
}

}  // namespace fragscope
