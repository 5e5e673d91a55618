// `fragscope demo`: the whole story on a built-in workload. A GPT-style model trains with
// variable sequence lengths on a simulated 16 GiB GPU through fragscope's reimplementation of
// PyTorch's caching allocator, with an event log recorded, and dies of a fragmentation OOM;
// fragscope analyzes the log, explains the OOM, sweeps allocator settings, re-runs the job with
// the recommended one, and writes the HTML report.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "allocator/format_size.h"
#include "allocator/simulated_backend.h"
#include "analysis/analyzer.h"
#include "analysis/demo_job.h"
#include "analysis/report/html_report.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "cli/cli_flags.h"
#include "cli/command_line.h"
#include "cli/json_output.h"
#include "cli/output_file.h"
#include "cli/progress_bar.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "demo",
      .synopsis = R"txt([--html OUT | --no-html] [--json OUT] [--log OUT] [--conf CONF]
                      [--capacity-gib N] [--steps N] [--micro-batch N] [--seed N] [--threads N])txt",
      .description =
          R"txt(Simulates mixed-precision (bf16) AdamW training of a GPT-2-medium-sized model (355M parameters,
flash attention) with variable sequence lengths on a simulated 16 GiB GPU, through fragscope's
reimplementation of PyTorch's caching allocator, recording an event log. The job dies of a
fragmentation OOM; fragscope explains it, sweeps max_split_size_mb and expandable segments,
re-runs the whole job under each setting that gets past the OOM, names the one that completes
with the least memory, and writes an HTML report (fragscope-demo.html by default).)txt",
      .flags = {{"--html", "OUT", "the HTML report's path (default fragscope-demo.html)"},
                {"--no-html", "", "no HTML report"},
                {"--json", "OUT",
                 "also write the JSON report (OUT -: to stdout, instead of the text)"},
                {"--log", "OUT", "keep the recorded event log (.fslog) there"},
                {"--conf", "CONF",
                 "the job's PYTORCH_CUDA_ALLOC_CONF (default: PyTorch's defaults)"},
                {"--capacity-gib", "N", "the simulated GPU's memory, 1 to 4096 (default 16)"},
                {"--steps", "N", "training steps, 1 to 1000 (default 12)"},
                {"--micro-batch", "N", "sequences per step, 1 to 4096 (default 10)"},
                {"--seed", "N", "the sequence lengths' random seed (default 3)"},
                {"--threads", "N", "sweep threads, 1 to 1024 (default: one per core)"}},
  };
  return spec;
}

// The workload that dies of fragmentation on 16 GiB (found by sweeping seeds and batch sizes;
// tests/analysis/demo_test.cc pins the outcome).
DemoWorkloadConfig DefaultWorkload() {
  DemoWorkloadConfig w;
  w.micro_batch = 10;
  w.seed = 3;
  w.steps = 12;
  w.flash_attention = true;
  return w;
}

// The flag's value in [1, max], or `fallback` when it is absent.
absl::StatusOr<int64_t> PositiveFlag(const ParsedFlags& flags, std::string_view name,
                                     int64_t fallback, uint64_t max) {
  const std::string* v = flags.Get(name);
  if (v == nullptr) return fallback;
  absl::StatusOr<uint64_t> n = ParseCount(*v, name);
  if (!n.ok() || *n == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s expects a positive whole number, got '%s'", name, *v));
  }
  if (*n > max) {
    return absl::InvalidArgumentError(absl::StrFormat("%s must be at most %d", name, max));
  }
  return static_cast<int64_t>(*n);
}

// Bounds of the demo's flags: the workload is generated in memory (about 2000 operations a step),
// and the activations' sizes must not overflow.
constexpr uint64_t kMaxSteps = 1000;
constexpr uint64_t kMaxMicroBatch = 4096;

// "its only step", "all 12 steps".
std::string AllSteps(int n) {
  return n == 1 ? "its only step" : absl::StrCat("all ", CountOf(static_cast<uint64_t>(n), "step"));
}

}  // namespace

int RunDemoCommand(const std::vector<std::string>& args, std::ostream& stdout_stream,
                   std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags =
      ParseCommandFlags(args, Command(), stdout_stream, err, &exit_code);
  if (!flags) return exit_code;
  // `--json -`: stdout carries the JSON report alone; the demo's text goes nowhere.
  JsonOutput json_output(flags->Get("--json"), stdout_stream);
  std::ostream& out = json_output.text();
  if (!flags->positional.empty()) {
    return UsageError(err, "demo",
                      absl::StrCat("unexpected argument '", flags->positional[0], "'"));
  }
  DemoWorkloadConfig workload = DefaultWorkload();
  absl::StatusOr<int64_t> capacity_gib =
      PositiveFlag(*flags, "--capacity-gib", 16, SimulatedBackend::kMaxCapacityBytes >> 30);
  absl::StatusOr<int64_t> steps = PositiveFlag(*flags, "--steps", workload.steps, kMaxSteps);
  absl::StatusOr<int64_t> batch =
      PositiveFlag(*flags, "--micro-batch", workload.micro_batch, kMaxMicroBatch);
  absl::StatusOr<int64_t> seed = PositiveFlag(*flags, "--seed", 3, INT64_MAX);
  absl::StatusOr<int64_t> threads = PositiveFlag(*flags, "--threads", 0, kMaxThreads);
  for (const absl::StatusOr<int64_t>* v : {&capacity_gib, &steps, &batch, &seed}) {
    if (!v->ok()) {
      return UsageError(err, "demo", v->status().message());
    }
  }
  if (!threads.ok() && flags->Has("--threads")) {
    return UsageError(err, "demo", threads.status().message());
  }
  workload.steps = static_cast<int>(*steps);
  workload.micro_batch = static_cast<int>(*batch);
  workload.seed = static_cast<uint64_t>(*seed);
  const std::string conf = flags->Get("--conf") != nullptr ? *flags->Get("--conf") : "";
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  if (!options.ok()) {
    return UsageError(err, "demo", absl::StrCat("--conf: ", options.status().message()));
  }
  const uint64_t capacity = static_cast<uint64_t>(*capacity_gib) * kGiB;
  if (flags->Has("--html") && flags->Has("--no-html")) {
    return UsageError(err, "demo", "--html and --no-html contradict each other");
  }
  const std::string html_path =
      flags->Get("--html") != nullptr ? *flags->Get("--html") : "fragscope-demo.html";
  std::vector<OutputPath> outputs;
  if (!flags->Has("--no-html")) outputs.push_back({"--html", html_path});
  if (json_output.requested() && !json_output.to_stdout()) {
    outputs.push_back({"--json", *flags->Get("--json")});
  }
  if (const std::string* path = flags->Get("--log")) outputs.push_back({"--log", *path});
  if (absl::Status s = CheckOutputPaths({}, outputs); !s.ok()) {
    return UsageError(err, "demo", s.message());
  }

  // 1. Run the job, recording its event log.
  const bool keep_log = flags->Has("--log");
  // The log is only the demo's working file unless --log keeps it: an exclusive, unguessable
  // temporary in the temporary directory, gone on every way out (output_file.h).
  const std::string log_name =
      keep_log ? *flags->Get("--log")
               : (std::filesystem::temp_directory_path() / "fragscope-demo.fslog").string();
  absl::StatusOr<std::unique_ptr<OutputFile>> log_file = OutputFile::Create(log_name);
  if (!log_file.ok()) {
    err << "fragscope demo: " << log_file.status().message() << "\n";
    return 1;
  }
  const std::string write_path = (*log_file)->write_path();
  FslogHeader header;
  header.device_total_bytes = capacity;
  header.device_name = absl::StrFormat("simulated %d GiB GPU", *capacity_gib);
  header.host = "fragscope-demo";
  header.allocator_options = conf;
  header.start_monotonic_ns = 1'000'000'000;
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> log = FslogFileWriter::Open(write_path, header);
  if (!log.ok()) {
    err << "fragscope demo: "
        << absl::StrReplaceAll(log.status().message(), {{write_path, log_name}}) << "\n";
    return 1;
  }
  // The job names its model, as fragscope.record_model() does in a real one: the analysis sets
  // the job against the model's theoretical footprint with no --model flag.
  (*log)->RecordModel(DemoModelRecord(workload), 0);
  WriteWrapped(
      out,
      absl::StrFormat("fragscope demo: %s of training a %.0fM-parameter GPT-style model "
                      "(bf16, AdamW, flash attention), micro-batch %d, sequence lengths varying "
                      "per step, on a simulated %d GiB GPU%s.",
                      CountOf(static_cast<uint64_t>(workload.steps), "step"),
                      static_cast<double>(DemoModelParameters(workload)) / 1e6,
                      workload.micro_batch, *capacity_gib,
                      conf.empty() ? "" : absl::StrCat(" with PYTORCH_CUDA_ALLOC_CONF=", conf)),
      "");
  out << "\n";
  absl::StatusOr<DemoJobResult> job = RunDemoJob(workload, *options, capacity, log->get());
  absl::Status closed = (*log)->Close();
  if (closed.ok() && keep_log) closed = (*log_file)->Commit();
  if (!job.ok() || !closed.ok()) {
    err << "fragscope demo: "
        << absl::StrReplaceAll((job.ok() ? closed : job.status()).message(),
                               {{write_path, log_name}})
        << "\n";
    return 1;
  }
  // What the analysis reads: the kept log, or the working file (by its exclusive name).
  const std::string log_path =
      keep_log || (*log_file)->temporary().empty() ? log_name : (*log_file)->temporary();
  if (job->completed) {
    out << absl::StrFormat("The job completed %s (peak reserved %s).\n\n", AllSteps(workload.steps),
                           FormatSize(job->peak_reserved_bytes));
  } else {
    out << absl::StrFormat("The job died after %s, in \"%s\":\n\n",
                           CountOf(static_cast<uint64_t>(job->steps_completed), "step"),
                           job->oom_phase);
    WriteWrapped(out, job->oom_message, "  ");
    out << "\n";
  }

  // 2. Analyze the log: explanation and sweep.
  out << "fragscope analyze "
      << (keep_log ? log_path : "(the job's event log; --log PATH keeps it)") << "\n\n";
  AnalysisOptions analysis;
  analysis.threads = threads.ok() ? static_cast<int>(*threads) : 0;
  ProgressBar bar(err);
  if (bar.active()) {
    analysis.progress = [&](const std::string& stage, double f) { bar.Update(stage, f); };
  }
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({log_path}, analysis);
  bar.Clear();
  if (!report.ok()) {
    err << "fragscope demo: " << report.status().message() << "\n";
    return 1;
  }
  // The reports would name the working log, which is gone when they are read.
  if (!keep_log) report->ranks[0].info.path = "the demo job's log, not kept";

  // 3. The log ends at the OOM, so the sweep shows which settings get past it. Re-run the whole
  // job under each of those; the fix is the one that completes every step with the lowest peak
  // reserved memory (then the fewest device mallocs). Their outcome goes into the report (the
  // fix, the recommendation) before any of it is printed, so that the text says what the JSON
  // and HTML say; the re-runs' table follows the report.
  std::ostringstream reruns_text;
  RankReport& rank = report->ranks[0];
  if (!job->completed && !rank.sweep.empty()) {
    struct Rerun {
      size_t sweep_index;
      DemoJobResult result;
    };
    std::vector<Rerun> reruns;
    for (size_t i = 0; i < rank.sweep.size(); ++i) {
      const SweepResult& r = rank.sweep[i];
      if (r.ooms != 0 || !r.error.empty() || !r.config.pytorch_applicable) continue;
      absl::StatusOr<DemoJobResult> rerun = RunDemoJob(workload, r.config.options, capacity);
      if (rerun.ok()) reruns.push_back({i, *std::move(rerun)});
    }
    std::stable_sort(reruns.begin(), reruns.end(), [&](const Rerun& a, const Rerun& b) {
      const auto key = [&](const Rerun& r) {
        return std::make_tuple(!r.result.completed, r.result.peak_reserved_bytes,
                               rank.sweep[r.sweep_index].device_mallocs);
      };
      return key(a) < key(b);
    });
    if (reruns.empty()) {
      reruns_text << "\nNo swept setting gets past the OOM.\n";
    } else {
      reruns_text << absl::StrFormat(
          "\nThe log ends at the OOM, so the sweep shows which settings get past it. Re-running "
          "the whole\njob (%s) under each of them, best first:\n",
          AllSteps(workload.steps));
    }
    for (const Rerun& r : reruns) {
      reruns_text << absl::StrFormat(
          "  %-47s %s\n", rank.sweep[r.sweep_index].config.label,
          r.result.completed ? absl::StrFormat("completes, peak reserved %s",
                                               FormatSize(r.result.peak_reserved_bytes))
                             : absl::StrFormat("dies later, in \"%s\"", r.result.oom_phase));
    }
    if (!reruns.empty() && reruns.front().result.completed) {
      const Rerun& fix = reruns.front();
      const std::string& label = rank.sweep[fix.sweep_index].config.label;
      rank.verdict.recommended = fix.sweep_index;
      rank.verdict.recommendation_headline = "recommended setting (the whole job completes)";
      rank.verdict.recommendation = absl::StrFormat(
          "avoids the OOM and completes %s (checked by re-running the whole job), with "
          "the lowest peak reserved memory of those that do",
          AllSteps(workload.steps));
      for (OomExplanation& x : rank.ooms) {
        x.avoided_by = absl::StrFormat(
            "%s avoids it, and the whole job then completes (peak reserved %s over %s)", label,
            FormatSize(fix.result.peak_reserved_bytes), AllSteps(workload.steps));
      }
      reruns_text << absl::StrFormat("\nThe fix: PYTORCH_CUDA_ALLOC_CONF=%s\n", label);
    } else if (!reruns.empty()) {
      // The sweep saw them get past this OOM; the re-runs show the job dies later all the same,
      // so none is recommended (JobVerdict: nothing is recommended that cannot save the job).
      const std::string why = absl::StrFormat(
          "re-running the whole job under every swept setting that gets past this OOM still runs "
          "out of memory later, in \"%s\"",
          reruns.front().result.oom_phase);
      rank.verdict.recommended.reset();
      rank.verdict.recommendation = absl::StrCat("No setting is recommended: ", why, ".");
      rank.verdict.recommendation_headline = "no swept setting completes the whole job";
      for (OomExplanation& x : rank.ooms) {
        if (x.in_replay) x.avoided_by = absl::StrCat("none shown to save the job: ", why);
      }
      reruns_text
          << "\nNo swept setting completes the whole job: each one that gets past this OOM runs "
             "out of\nmemory later.\n";
    }
  }
  TextReportOptions text;
  text.memory_summary = false;
  RenderTextReport(*report, text, out);
  out << reruns_text.str();

  // 4. Reports.
  // The HTML and JSON reports are written all or none.
  std::vector<OutputSpec> reports;
  if (!flags->Has("--no-html")) {
    reports.push_back({html_path, [&](std::ostream& o) { WriteHtmlReport(*report, o); }});
  }
  const std::string* json = flags->Get("--json");
  if (json_output.requested() && !json_output.to_stdout()) {
    reports.push_back({*json, [&](std::ostream& o) { WriteJsonReport(*report, {}, o); }});
  }
  if (absl::Status s = WriteOutputFiles(reports); !s.ok()) {
    err << "fragscope demo: " << s.message() << "\n";
    return 1;
  }
  if (json_output.to_stdout()) {
    if (absl::Status s =
            json_output.Write([&](std::ostream& o) { WriteJsonReport(*report, {}, o); });
        !s.ok()) {
      err << "fragscope demo: " << s.message() << "\n";
      return 1;
    }
  }
  if (!flags->Has("--no-html")) out << "\nHTML report: " << html_path << "\n";
  if (json != nullptr) out << "JSON report: " << *json << "\n";
  if (keep_log) out << "Event log: " << log_path << "\n";
  return 0;
}

}  // namespace fragscope::cli
