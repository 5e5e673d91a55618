#include "analysis/chrome_trace.h"

#include "absl/strings/str_format.h"
#include "estimator/report.h"

namespace fragscope {

ChromeTraceWriter::ChromeTraceWriter(Replayer& replayer, std::ostream& out) : out_(out) {
  tracker_.Assign(replayer.allocator().GetStats());
  pid_ = replayer.info().rank;
  out_ << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out_ << absl::StrFormat(
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": %s}}", pid_,
      estimator::JsonQuote(absl::StrFormat("fragscope: %s (device %d)", replayer.info().path,
                                           replayer.info().device)));
  ++written_;
}

void ChromeTraceWriter::WriteCounter() {
  const DeviceStats s = tracker_.stats();
  out_ << absl::StrFormat(
      ",\n{\"name\": \"memory\", \"ph\": \"C\", \"ts\": %d, \"pid\": %d, \"args\": "
      "{\"allocated\": %d, \"active\": %d, \"reserved\": %d}}",
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
  if (event.kind == EventKind::kMarker) {
    out_ << absl::StrFormat(
        ",\n{\"name\": %s, \"cat\": \"marker\", \"ph\": \"i\", \"s\": \"p\", \"ts\": %d, "
        "\"pid\": %d, \"tid\": 0}",
        estimator::JsonQuote(event.text), us, pid_);
    ++written_;
  }
}

void ChromeTraceWriter::OnOpDone(const TraceEvent& event) {
  pending_us_ = event.time_ns / 1000;
  have_pending_ = true;
}

void ChromeTraceWriter::OnOom(const ReplayOom& oom) {
  const TraceEvent& e = *oom.event;
  out_ << absl::StrFormat(
      ",\n{\"name\": \"OOM\", \"cat\": \"oom\", \"ph\": \"i\", \"s\": \"g\", \"ts\": %d, \"pid\": "
      "%d, \"tid\": 0, \"args\": {\"event\": %d, \"requested_bytes\": %d, \"in_trace\": %s, "
      "\"in_replay\": %s, \"reserved_bytes\": %d, \"allocated_bytes\": %d, "
      "\"largest_free_block_bytes\": %d}}",
      e.time_ns / 1000, pid_, e.index, e.requested_bytes > 0 ? e.requested_bytes : e.bytes,
      oom.in_trace ? "true" : "false", oom.in_replay ? "true" : "false", oom.report.reserved_bytes,
      oom.report.allocated_bytes, oom.report.largest_free_cached_block);
  ++written_;
}

void ChromeTraceWriter::OnFinish() {
  if (have_pending_) WriteCounter();
  have_pending_ = false;
  out_ << "\n]}\n";
}

}  // namespace fragscope
