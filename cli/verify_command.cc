// `fragscope verify`: replays a trace's alloc/free sequence through fragscope's allocator and
// compares every allocator decision with the trace's own (fidelity_check.h).
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/analyzer.h"
#include "analysis/replay/fidelity_check.h"
#include "analysis/replay/replay.h"
#include "analysis/report/text_report.h"
#include "analysis/sources/open_trace.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "verify",
      .synopsis =
          R"txt(LOG [--capacity SIZE] [--memory-fraction F | --allowed SIZE] [--device N])txt",
      .description =
          R"txt(Feeds the trace's user-level allocations and frees through fragscope's reimplementation of
PyTorch's caching allocator, on a simulated device that hands out the trace's own segment
addresses, and compares every decision with the trace's: segment allocations and frees, or the
pages mapped and unmapped in expandable segments (address and size, in order), block addresses,
and OOMs. Prints "faithful (N events)" or the first divergence with the trace events before it.
Exit status 0 when faithful, 1 otherwise.
A snapshot with several devices' traces is verified device by device (each under a "device N:"
heading; exit status 0 only when every device is faithful); --device N verifies one.
A trace may be `-` (standard input) or a stream (a pipe, a FIFO, <(...)): it is read once,
into an unlinked temporary file, and replayed from there.

PyTorch snapshots do not record a per-process memory fraction: for a trace that ran under
torch.cuda.set_per_process_memory_fraction, pass --memory-fraction (or --allowed) and --capacity
(a trace whose settings set garbage_collection_threshold had one: PyTorch collects only under a
cap).
Nor do they record the device's memory, which sizes expandable segments' address reservations
(9/8 of it each): for a trace that used expandable segments, pass --capacity.)txt",
      .flags = kTraceFlags,
      .positional = {.min = 1, .max = 1, .error = "expected exactly one trace"},
  };
  return spec;
}

// Verifies one trace (one device's, for a snapshot): 0 faithful, 1 otherwise.
int VerifyTrace(const TraceOpener& opener, const AnalysisOptions& options, std::ostream& out,
                std::ostream& err) {
  const std::string& path = opener.path();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) {
    err << "fragscope verify: " << source.status().message() << "\n";
    return 1;
  }
  const TraceInfo& info = (*source)->info();
  if (info.format == TraceFormat::kRmmCsv) {
    err << "fragscope verify: " << path
        << ": an RMM log records no allocator decisions (segments) to compare with; use "
           "`fragscope analyze` to replay it\n";
    return 1;
  }
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig(info, options);
  if (!config.ok()) {
    err << "fragscope verify: " << config.status().message() << "\n";
    return 1;
  }
  Replayer replayer(**source, *config);
  if (absl::Status s = replayer.Init(); !s.ok()) {
    err << "fragscope verify: " << s.message() << "\n";
    return 1;
  }
  FidelityChecker checker;
  if (absl::Status s = replayer.Run(&checker); !s.ok()) {
    err << "fragscope verify: " << s.message() << "\n";
    return 1;
  }
  // The replay's warnings and the reader's (a torn tail dropped, chunks skipped).
  std::vector<std::string> warnings = replayer.warnings();
  for (std::string& w : (*source)->warnings()) warnings.push_back(std::move(w));
  if (replayer.events_read() == 0) {
    err << "fragscope verify: " << path << ": the trace is empty (no events): nothing to verify\n";
    for (const std::string& w : warnings) err << "  warning: " << w << "\n";
    return 1;
  }
  const FidelityCounts& c = checker.counts();
  if (!checker.divergence().has_value()) {
    const std::string maps =
        c.segment_maps + c.segment_unmaps == 0
            ? ""
            : absl::StrFormat(" (%s, %s)", CountOf(c.segment_maps, "segment map"),
                              CountOf(c.segment_unmaps, "unmap"));
    WriteWrapped(out,
                 absl::StrFormat("faithful (%s): %s%s, %s and %s match the trace",
                                 CountOf(replayer.events_read(), "event"),
                                 CountOf(c.segment_events, "segment event"), maps,
                                 CountOf(c.allocations, "allocation"), CountOf(c.ooms, "OOM")),
                 "");
    for (const std::string& w : warnings) out << "  warning: " << w << "\n";
    return 0;
  }
  const Divergence& d = *checker.divergence();
  out << absl::StrFormat("diverged at event %d (after %s)\n", d.event_index,
                         CountOf(c.segment_events + c.allocations + c.ooms, "matching decision"));
  out << "  expected (trace):   " << d.expected << "\n";
  out << "  got (fragscope):    " << d.got << "\n";
  out << "  the trace's events up to it:\n";
  for (const std::string& line : d.context) out << "    " << line << "\n";
  // A job under a memory cap either fails here or first releases its cached segments to retry
  // (PyTorch's retry ladder); a replay without the cap does neither: it takes new memory, or
  // (its layout departed earlier) nothing at all.
  const auto is = [](std::optional<EventKind> kind, EventKind want) { return kind == want; };
  const bool starts_retry = (is(d.expected_kind, EventKind::kSegmentFree) ||
                             is(d.expected_kind, EventKind::kSegmentUnmap)) &&
                            (!d.got_kind.has_value() || is(d.got_kind, EventKind::kSegmentAlloc) ||
                             is(d.got_kind, EventKind::kSegmentMap));
  // garbage_collection_threshold acts only under a memory fraction (PyTorch's rule): with one set
  // and no cap, the replay never collects, and the job's collections show as segment frees (or
  // frees elsewhere) that the replay does not make.
  const auto is_segment = [](std::optional<EventKind> kind) {
    return kind == EventKind::kSegmentAlloc || kind == EventKind::kSegmentFree ||
           kind == EventKind::kSegmentMap || kind == EventKind::kSegmentUnmap;
  };
  const bool segment_decision = is_segment(d.expected_kind) || is_segment(d.got_kind);
  const bool gc_without_cap = config->options.garbage_collection_threshold > 0 &&
                              !ReplayCapBytes(*config).has_value() && segment_decision;
  if (gc_without_cap) {
    WriteWrapped(out,
                 absl::StrFormat(
                     "the trace's settings set garbage_collection_threshold:%g, which PyTorch "
                     "applies only under a per-process memory fraction, and no cap is known: the "
                     "job ran under one that the trace does not record (snapshots never do). Pass "
                     "--memory-fraction or --allowed, and --capacity.",
                     config->options.garbage_collection_threshold),
                 "  hint: ");
  } else if ((is(d.expected_kind, EventKind::kOom) || starts_retry) &&
             !config->allowed_bytes.has_value() && info.format != TraceFormat::kRmmCsv) {
    WriteWrapped(
        out,
        absl::StrFormat(
            "PyTorch %s here but the replay did not. If the job ran under a per-process memory "
            "fraction that the trace does not record (snapshots never do; a log whose job set the "
            "fraction outside fragscope's view may not), pass --memory-fraction or --allowed, "
            "and --capacity.",
            starts_retry ? "released cached segments to retry an allocation" : "ran out of memory"),
        "  hint: ");
  }
  if (info.expandable_segments && !options.capacity_bytes.has_value() && info.capacity_bytes == 0) {
    WriteWrapped(out,
                 "the trace uses expandable segments, whose address reservations are 9/8 of the "
                 "device's memory each, and it does not record that memory (the replay assumed "
                 "1 TiB): pass the device's --capacity so reservations land at the trace's "
                 "addresses.",
                 "  hint: ");
  }
  for (const std::string& w : warnings) out << "  warning: " << w << "\n";
  return 1;
}

}  // namespace

int RunVerifyCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "verify", s.message());
  }
  const std::string& path = flags->positional[0];
  absl::StatusOr<TraceOpener> opener =
      TraceOpener::Create(path, {.device = options.device, .every_device = true});
  if (!opener.ok()) {
    err << "fragscope verify: " << opener.status().message() << "\n";
    return 1;
  }
  const std::vector<int> devices = opener->Devices();
  if (options.device >= 0 || devices.size() <= 1) return VerifyTrace(*opener, options, out, err);
  // A snapshot with several devices' traces: each device is verified; all must be faithful.
  int status = 0;
  for (const int device : devices) {
    out << (device == devices.front() ? "" : "\n") << "device " << device << ":\n";
    absl::StatusOr<TraceOpener> one = opener->ForDevice(device);
    if (!one.ok()) {
      err << "fragscope verify: " << one.status().message() << "\n";
      return 1;
    }
    status = std::max(status, VerifyTrace(*one, options, out, err));
  }
  return status;
}

}  // namespace fragscope::cli
