// `fragscope summarize`: each trace reduced to its rank summary (rank_summary.h), to be merged
// with the other ranks' by `fragscope merge`.
#include <sys/stat.h>
#include <optional>

#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/ranks/rank_reduction.h"
#include "analysis/ranks/rank_summary_json.h"
#include "cli/output_file.h"
#include "cli/rank_commands.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "summarize",
      .synopsis = R"txt(LOG... [--json OUT | --out-dir DIR] [--rank N] [options])txt",
      .description =
          R"txt(Replays each trace (an .fslog event log, compressed or not, a PyTorch snapshot pickle, an RMM
CSV; a directory stands for the traces in it) and reduces it to its rank's summary: peak
allocated and reserved memory, utilization, memory outside PyTorch, OOMs and their causes, and
which phases raised the peaks. Run it where the logs were written, under the job's own launcher
(a Slurm array, a torchrun step), then build the cross-rank report from all summaries with
`fragscope merge`. Traces are summarized in parallel, one replay per thread. Schema of the JSON:
analysis/CROSS_RANK_SCHEMA.md ("fragscope.rank_summary").
A trace may be `-` (standard input) or a stream (a pipe, a FIFO, <(...)): it is read once,
into an unlinked temporary file, and replayed from there.

A snapshot pickle or RMM CSV records no rank: it is read from the file name ("rank3_...",
"oom_rank3.pickle"), else --rank, else the trace's position among those given.)txt",
      .flags =
          Flags({{{"--json", "OUT", "write the summary of the one trace to OUT"},
                  {"--out-dir", "DIR",
                   "write each trace's summary to DIR/NAME.summary.json (NAME: the trace's name)"},
                  {"--rank", "N",
                   "the rank of the one trace (overrides the log header and the file name)"},
                  {"--threads", "N", "traces summarized at once (default: one per core)"}},
                 kTraceFlags}),
      .footer =
          R"txt(Without --json or --out-dir, one line per trace is printed and nothing is written.)txt",
      .positional = {.min = 1, .error = "no trace given"},
  };
  return spec;
}

std::string Line(const RankSummary& s) {
  return absl::StrFormat(
      "rank %d (%s): %d events, peak allocated %s, peak reserved %s, utilization %.1f%%, outside "
      "PyTorch %s, %d OOM%s%s",
      s.rank, RankSourceName(s.rank_source), s.events, FormatSize(s.peak_allocated_bytes),
      FormatSize(s.peak_reserved_bytes), 100 * s.utilization,
      s.outside_pytorch_bytes.has_value() ? FormatSize(*s.outside_pytorch_bytes) : "unknown",
      s.oom_count, s.oom_count == 1 ? "" : "s",
      s.first_oom.has_value() ? absl::StrCat(" (first: ", s.first_oom->cause, ")") : "");
}

// CheckOutputPaths for many files: inputs and outputs compared by file identity in a set, not
// pairwise.
absl::Status CheckNoOutputIsAnInput(const std::vector<std::string>& inputs,
                                    const std::vector<OutputPath>& outputs) {
  std::set<std::pair<dev_t, ino_t>> files;
  struct stat st;
  for (const std::string& in : inputs) {
    if (stat(in.c_str(), &st) == 0) files.emplace(st.st_dev, st.st_ino);
  }
  for (const OutputPath& out : outputs) {
    if (stat(out.path.c_str(), &st) == 0 && files.count({st.st_dev, st.st_ino}) > 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s would write '%s', which is an input trace", out.flag, out.path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunSummarizeCommand(const std::vector<std::string>& args, std::ostream& out,
                        std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  AnalysisOptions options;
  options.run_sweep = false;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "summarize", s.message());
  }
  if (flags->Has("--json") && flags->Has("--out-dir")) {
    return UsageError(err, "summarize", "give --json (one trace) or --out-dir, not both");
  }
  absl::StatusOr<std::vector<std::string>> traces = ExpandTraceInputs(flags->positional);
  if (!traces.ok()) {
    err << "fragscope summarize: " << traces.status().message() << "\n";
    return 1;
  }
  RankReductionOptions reduction;
  reduction.threads = options.threads;
  if (const std::string* rank = flags->Get("--rank")) {
    absl::StatusOr<uint64_t> n = ParseCount(*rank, "--rank");
    if (!n.ok() || *n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return UsageError(err, "summarize",
                        n.ok() ? absl::StrFormat("--rank %s is too large", *rank)
                               : std::string(n.status().message()));
    }
    reduction.flag_rank = static_cast<int32_t>(*n);
  }
  if ((flags->Has("--json") || reduction.flag_rank.has_value()) && traces->size() != 1) {
    return UsageError(err, "summarize",
                      absl::StrFormat("--json and --rank are for one trace; %d were given (use "
                                      "--out-dir for several)",
                                      traces->size()));
  }
  // Where each summary goes, checked before any trace is read.
  std::vector<OutputPath> outputs;
  if (const std::string* json = flags->Get("--json")) {
    outputs.push_back({"--json", *json});
    if (absl::Status s = CheckOutputPaths(*traces, outputs); !s.ok()) {
      return UsageError(err, "summarize", s.message());
    }
  }
  if (const std::string* dir = flags->Get("--out-dir")) {
    std::error_code ec;
    if (!std::filesystem::is_directory(*dir, ec)) {
      return UsageError(err, "summarize", absl::StrFormat("--out-dir %s is not a directory", *dir));
    }
    std::map<std::string, std::string> names;
    for (const std::string& trace : *traces) {
      const std::string name = std::filesystem::path(trace).filename().string();
      auto [it, inserted] = names.emplace(name, trace);
      if (!inserted) {
        return UsageError(err, "summarize",
                          absl::StrFormat("%s and %s would both write %s.summary.json in --out-dir",
                                          it->second, trace, name));
      }
      outputs.push_back(
          {"--out-dir", (std::filesystem::path(*dir) / (name + ".summary.json")).string()});
    }
    // The names differ, so the outputs do; none may be a trace (each file looked up once).
    if (absl::Status s = CheckNoOutputIsAnInput(*traces, outputs); !s.ok()) {
      return UsageError(err, "summarize", s.message());
    }
  }

  absl::StatusOr<std::vector<RankSummary>> summaries = SummarizeRanks(*traces, options, reduction);
  if (!summaries.ok()) {
    err << "fragscope summarize: " << summaries.status().message() << "\n";
    return 1;
  }
  for (size_t i = 0; i < summaries->size(); ++i) {
    const RankSummary& s = (*summaries)[i];
    out << s.path << ": " << Line(s);
    if (!outputs.empty()) {
      const std::string& path = outputs[i].path;
      if (absl::Status st =
              WriteOutputFile(path, [&](std::ostream& o) { o << RankSummaryDocument(s); });
          !st.ok()) {
        out << "\n";
        err << "fragscope summarize: " << st.message() << "\n";
        return 1;
      }
      out << " -> " << path;
    }
    out << "\n";
  }
  return 0;
}

}  // namespace fragscope::cli
