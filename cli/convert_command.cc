// `fragscope convert IN OUT`: between the formats fragscope reads and writes. The input (any
// trace source) is replayed through fragscope's allocator, and the replay's allocator events are
// written out, so every output carries complete allocator decisions (segments, block sizes)
// even when the input had none (an RMM CSV). For a trace that `fragscope verify` finds faithful
// (any .fslog written by fragscope, PyTorch's own snapshots) they are the trace's own decisions.
#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "allocator/format_size.h"
#include "allocator/memory_fraction.h"
#include "allocator/size_policy.h"
#include "analysis/analyzer.h"
#include "analysis/explain/segment_map.h"
#include "analysis/replay/hook_list.h"
#include "analysis/report/chrome_trace.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/report/snapshot_export.h"
#include "analysis/report/text_report.h"
#include "analysis/report/text_wrap.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"
#include "cli/convert_hooks.h"
#include "cli/output_file.h"

namespace fragscope::cli {
namespace {

// --events FIRST:LAST, either end optional; errors name the flag.
struct EventRange {
  uint64_t first = 0;
  std::optional<uint64_t> last;
};
absl::StatusOr<EventRange> ParseEventRange(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string first = text.substr(0, colon);
  const std::string last = colon == std::string::npos ? "" : text.substr(colon + 1);
  EventRange range;
  uint64_t value = 0;
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--events '", text, "': expected FIRST:LAST event numbers (FIRST <= LAST; 100:, :5000)"));
  };
  if (colon == std::string::npos || (first.empty() && last.empty())) return bad();
  if (!first.empty() && !absl::SimpleAtoi(first, &range.first)) return bad();
  if (!last.empty()) {
    if (!absl::SimpleAtoi(last, &value) || value < range.first) return bad();
    range.last = value;
  }
  return range;
}

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "convert",
      .synopsis = R"txt(IN OUT [--to fslog|pickle|chrome] [--events FIRST:LAST] [--capacity SIZE]
                         [--device N] [--memory-fraction F | --allowed SIZE])txt",
      .description =
          R"txt(Converts between trace formats. IN: an .fslog event log, a PyTorch snapshot pickle, or an RMM
CSV. OUT, chosen by --to or by OUT's extension:
  .fslog          fragscope's event log (fslog/FORMAT.md)
  .pickle, .pkl   a PyTorch memory snapshot (device_traces + segments) that
                  `python -m torch.cuda._memory_viz` and pytorch.org/memory_viz open
  .json           Chrome trace-event JSON for ui.perfetto.dev: allocated / active / reserved
                  counters, markers and OOMs as instant events
The input is replayed through fragscope's allocator and the replay's events are written.
IN may be `-` (standard input) or a stream (a pipe, a FIFO, <(...)): it is read once,
into an unlinked temporary file, and replayed from there.
A trace with expandable segments needs the device's --capacity unless it records it (snapshots
do not): their address reservations are sized by it, and without it the output's addresses
would not be the trace's.
--events FIRST:LAST (snapshot and Chrome outputs) writes only what the trace's events FIRST to
LAST did (event numbers as `dump` and the reports give them; either end may be left out), as a
time range of the job: the snapshot's segments are the layout after LAST, and the blocks
allocated before FIRST are, for memory_viz, blocks from before the trace.
Markers are not written to a snapshot. The job's OOMs stay OOMs: one the replay does not
reproduce (the job ran under a cap or on a device the trace does not record: give
--memory-fraction, --allowed or --capacity) is written as the trace recorded it, with a warning.)txt",
      .flags =
          Flags({{{"--to", "FORMAT", "fslog, pickle or chrome (default: from OUT's extension)"},
                  {"--events", "FIRST:LAST",
                   "only the trace events FIRST to LAST, inclusive (snapshot and Chrome outputs)"}},
                 kTraceFlags}),
      .positional = {.min = 2, .max = 2, .error = "expected IN and OUT"},
  };
  return spec;
}

}  // namespace

int RunConvertCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  const std::string& in = flags->positional[0];
  const std::string& out_path = flags->positional[1];
  // Writing OUT truncates it while IN is still being read: never the same file.
  std::error_code ec;
  if (std::filesystem::equivalent(in, out_path, ec)) {
    return UsageError(
        err, "convert",
        absl::StrCat("'", out_path, "' is the input file; write the output to another path"));
  }
  std::string to = flags->Get("--to") != nullptr ? *flags->Get("--to") : "";
  if (to.empty()) {
    if (absl::EndsWith(out_path, ".fslog")) to = "fslog";
    if (absl::EndsWith(out_path, ".pickle") || absl::EndsWith(out_path, ".pkl")) to = "pickle";
    if (absl::EndsWith(out_path, ".json")) to = "chrome";
  }
  OutFormat format;
  if (to == "fslog") {
    format = OutFormat::kFslog;
  } else if (to == "pickle") {
    format = OutFormat::kPickle;
  } else if (to == "chrome") {
    format = OutFormat::kChrome;
  } else if (flags->Get("--to") != nullptr) {
    return UsageError(err, "convert",
                      absl::StrCat("--to '", to, "': expected fslog, pickle or chrome"));
  } else {
    return UsageError(err, "convert",
                      absl::StrCat("cannot tell the output format of '", out_path,
                                   "': use an .fslog, .pickle or .json name, or --to "
                                   "fslog|pickle|chrome"));
  }
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "convert", s.message());
  }
  EventRange range;
  if (const std::string* text = flags->Get("--events")) {
    absl::StatusOr<EventRange> parsed = ParseEventRange(*text);
    if (!parsed.ok()) return UsageError(err, "convert", parsed.status().message());
    if (format == OutFormat::kFslog) {
      return UsageError(err, "convert",
                        "--events: a range is written to a snapshot (.pickle) or Chrome trace "
                        "(.json); an .fslog is converted whole");
    }
    range = *parsed;
  }
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(in, {options.device});
  if (!opener.ok()) {
    err << "fragscope convert: " << opener.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  if (!source.ok()) {
    err << "fragscope convert: " << source.status().message() << "\n";
    return 1;
  }
  const TraceInfo& info = (*source)->info();
  // Expandable segments reserve 9/8 of the device's memory per stream: under an assumed capacity
  // the replay maps its pages at other addresses than the trace's, and OUT would carry those
  // (and a replay of OUT would then verify faithful to them). Refused, not guessed.
  if (info.expandable_segments && !options.capacity_bytes.has_value() && info.capacity_bytes == 0) {
    err << WrapParagraph(
        absl::StrCat(in,
                     ": the trace uses expandable segments and does not record the device's "
                     "memory, which sizes their address reservations (9/8 of it each): without "
                     "it the replay would map pages at other addresses than the trace's, and the "
                     "output would carry them. Pass the device's --capacity (torch.cuda."
                     "get_device_properties(device).total_memory)."),
        "fragscope convert: ", "  ");
    return 2;
  }
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig(info, options);
  if (!config.ok()) {
    err << "fragscope convert: " << config.status().message() << "\n";
    return 1;
  }
  if (options.conf.has_value()) {
    config->empty_cache_at = TraceEmptyCacheCalls(*opener, info, options);
  }
  if (range.last.has_value()) config->stop_after_index = *range.last;
  Replayer replayer(**source, *config);
  if (absl::Status s = replayer.Init(); !s.ok()) {
    err << "fragscope convert: " << s.message() << "\n";
    return 1;
  }
  // Written beside OUT and renamed over it at the end: a failed conversion leaves OUT as it was.
  absl::StatusOr<std::unique_ptr<OutputFile>> output = OutputFile::Create(out_path);
  if (!output.ok()) {
    err << "fragscope convert: " << output.status().message() << "\n";
    return 1;
  }
  const std::string& write_path = (*output)->write_path();
  absl::Status status;
  std::string written;             // what the summary line says
  uint64_t served_ooms = 0;        // ConvertHooks::served_ooms
  std::vector<std::string> notes;  // warnings about what the output leaves out
  RefusedAllocations refused;
  // Runs the replay into `writer`, counting the refused allocations beside it.
  auto run = [&](ReplayHooks* writer) {
    HookList hooks;
    hooks.Add(writer);
    hooks.Add(&refused);
    return replayer.Run(&hooks);
  };
  if (format == OutFormat::kChrome) {
    ChromeTraceWriter writer(replayer, (*output)->stream());
    writer.set_first_index(range.first);
    status = run(&writer);
    written = CountOf(writer.events_written(), "trace event") + " (Chrome trace JSON)";
  } else if (format == OutFormat::kFslog) {
    FslogHeader header;
    header.device_index = info.device;
    // The capacity the log header claims: one given or recorded, never the 1 TiB a replay
    // assumes for a trace without one (0: not recorded); one inferred from OOM records is
    // written and said.
    std::string capacity_source;
    ResolveCapacity(info, options, &capacity_source);
    if (options.capacity_bytes.has_value() || info.capacity_bytes > 0) {
      header.device_total_bytes = config->capacity_bytes;
      if (!options.capacity_bytes.has_value() && capacity_source != "log header") {
        notes.push_back(absl::StrCat("the log header records the device capacity as ",
                                     FormatSize(config->capacity_bytes), ", from the ",
                                     capacity_source, "; give --capacity to record the device's"));
      }
    }
    // The memory held before the trace's first event, as the replay rebuilt it, in the
    // replay's addresses like the events that follow.
    const std::vector<InitialSegment> state = StateBeforeTrace(CurrentLayout(replayer));
    if (!info.initial_segments.empty() && state.empty()) {
      uint64_t blocks = 0;
      for (const InitialSegment& seg : info.initial_segments) blocks += seg.allocated.size();
      notes.push_back(absl::StrCat(
          CountOf(info.initial_segments.size(), "segment"), " and ",
          CountOf(blocks, "allocated block"),
          " existed before the trace's first event and the replay could not rebuild them, so the "
          "converted log starts without them (its peaks leave them out)"));
    }
    header.device_name = info.device_name;
    header.host = info.host;
    header.pid = info.pid;
    header.rank = info.rank;
    header.world_size = info.world_size;
    // A cap given to the conversion (--memory-fraction, --allowed) is the job's: the log keeps it,
    // as a job's own log does, so that its replay needs no flag.
    AllocatorOptions recorded = config->options;
    if (config->allowed_bytes.has_value()) {
      recorded.per_process_memory_fraction =
          FractionForAllowedBytes(*config->allowed_bytes, config->capacity_bytes);
    }
    header.allocator_options = FormatAllocatorOptions(recorded);
    header.start_wall_ns = info.start_wall_ns;
    header.start_monotonic_ns = 1'000'000'000;
    absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer =
        FslogFileWriter::Open(write_path, header);
    if (!writer.ok()) {
      err << "fragscope convert: "
          << absl::StrReplaceAll(writer.status().message(), {{write_path, out_path}}) << "\n";
      return 1;
    }
    (*writer)->AppendState(state);
    ConvertHooks hooks(writer->get(), nullptr, info.device, 0);
    status = run(&hooks);
    served_ooms = hooks.served_ooms();
    if (absl::Status closed = (*writer)->Close(); status.ok()) status = closed;
    written = CountOf((*writer)->records(), "record");
  } else {
    SnapshotExportBuilder builder(info.device);
    builder.SetAllocatorSettings(FormatAllocatorOptions(config->options));
    ConvertHooks hooks(nullptr, &builder, info.device, info.start_wall_ns / 1000);
    hooks.set_first_index(range.first);
    status = run(&hooks);
    served_ooms = hooks.served_ooms();
    if (hooks.dropped_markers() > 0) {
      notes.push_back(absl::StrCat(CountOf(hooks.dropped_markers(), "marker"),
                                   " (phase annotations) of the trace are not written: the "
                                   "snapshot export has no annotations (convert to .fslog or "
                                   ".json keeps them)"));
    }
    if (status.ok()) {
      builder.SetSegments(ToExport(CurrentLayout(replayer)));
      status = builder.Write(write_path);
    }
    written = absl::StrFormat("PyTorch snapshot with %d trace %s", builder.trace_entries(),
                              builder.trace_entries() == 1 ? "entry" : "entries");
  }
  if (status.ok() && replayer.events_read() == 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat(in, ": the trace is empty (no allocation events): nothing to convert"));
  }
  for (const std::string& w : (*source)->warnings()) {
    err << "fragscope convert: warning: " << w << "\n";
  }
  if (status.ok()) status = (*output)->Commit();
  if (!status.ok()) {
    // The writers name the file they wrote, the temporary: the user named OUT.
    err << "fragscope convert: " << absl::StrReplaceAll(status.message(), {{write_path, out_path}})
        << "\n";
    return 1;
  }
  out << out_path << ": " << written << "\n";
  for (const std::string& w : replayer.warnings()) {
    err << "fragscope convert: warning: " << w << "\n";
  }
  if (served_ooms > 0) {
    notes.push_back(absl::StrCat(
        CountOf(served_ooms, "OOM"),
        " of the trace did not happen in the replay (the job had less room than the replay: a cap "
        "or device size the trace does not record; give --memory-fraction, --allowed or "
        "--capacity): written as the trace recorded them, without the allocations the replay made "
        "for them, but the replay's segments around them may differ from the job's"));
  }
  if (refused.count() > 0) notes.push_back(refused.Note());
  for (const std::string& note : notes) {
    err << WrapParagraph(note, "fragscope convert: warning: ", "  ");
  }
  return 0;
}

}  // namespace fragscope::cli
