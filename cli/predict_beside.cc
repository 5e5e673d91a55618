#include "cli/predict_beside.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "analysis/metrics/phase_peaks.h"
#include "analysis/sources/excerpt.h"
#include "cli/python_command.h"
#include "estimator/json_value.h"
#include "nlohmann/json.hpp"

namespace fragscope::cli {
namespace {

using Json = nlohmann::json;

constexpr char kWarning[] = "--predict: ";

// The job's value of `key` as text ("" when the record does not give it).
std::string JobText(const Json& job, const char* key) {
  auto it = job.find(key);
  if (it == job.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  return it->dump();
}

// The last lines of a child's output, for a warning.
std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const size_t from = s.size() > 400 ? s.size() - 400 : 0;
  std::string tail = s.substr(from);
  if (const size_t nl = tail.rfind("\n"); nl != std::string::npos && nl + 1 < tail.size()) {
    tail = tail.substr(nl + 1);  // the last line says what failed
  }
  return Excerpt(tail);
}

// The GPU whose kernels the prediction chooses: --gpu's, else the H100 (the predictor's default).
std::string GpuOf(const AnalysisOptions& options) {
  absl::string_view flag = options.capacity_flag;
  if (absl::ConsumePrefix(&flag, "--gpu ")) return std::string(flag);
  return "h100-80gb";
}

// A private directory for the config and the predicted log, removed with its files.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/fragscope-predict.XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A recorded job's positive integer `key` (1 when absent); errors name it.
absl::StatusOr<int64_t> LayoutSize(const Json& job, const char* key) {
  const std::string text = JobText(job, key);
  if (text.empty()) return 1;
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job.", key, " \"", Excerpt(text), "\" is not a positive integer"));
  }
  return n;
}

// One rank of a parallel job (the record of a --parallel/--tp/--pp/--ep/--cp prediction or of a
// job that recorded its layout: dp, tp, zero; pp with its schedule and microbatches, ep, cp):
// the same rank of the same layout, FSDP2 for ZeRO-3, DDP for replicated data parallelism. The
// world is pp x dp x tp x cp (a record's dp is a stage's data-parallel ranks, with the
// expert-parallel ones among them); expert routing is the predictor's default (balanced), which
// the record does not name.
absl::Status AddLayout(const Json& job, int32_t rank, std::vector<std::string>& args) {
  int64_t size[5] = {};
  const char* keys[5] = {"dp", "tp", "pp", "ep", "cp"};
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<int64_t> n = LayoutSize(job, keys[i]);
    if (!n.ok()) return n.status();
    size[i] = *n;
  }
  const auto [dp, tp, pp, ep, cp] = size;
  const std::string zero = JobText(job, "zero");
  if (dp * tp * pp * cp == 1 && zero.empty()) return absl::OkStatus();
  if (zero == "3") {
    args.insert(args.end(), {"--parallel", "fsdp2"});
  } else if (dp > 1) {
    if (!zero.empty() && zero != "0") {
      return absl::InvalidArgumentError(absl::StrCat(
          "job.zero ", Excerpt(zero), " is not a layout the predictor runs (3: FSDP2, 0: DDP)"));
    }
    args.insert(args.end(), {"--parallel", "ddp"});
  }
  if (tp > 1) args.insert(args.end(), {"--tp", std::to_string(tp)});
  if (pp > 1) {
    args.insert(args.end(), {"--pp", std::to_string(pp)});
    const std::string schedule = JobText(job, "pp_schedule");
    if (!schedule.empty()) {
      if (schedule != "gpipe" && schedule != "1f1b" && schedule != "interleaved-1f1b") {
        return absl::InvalidArgumentError(
            absl::StrCat("job.pp_schedule \"", Excerpt(schedule),
                         "\" is not a schedule the "
                         "predictor runs (gpipe, 1f1b, interleaved-1f1b)"));
      }
      args.insert(args.end(), {"--pp-schedule", schedule});
    }
    if (!JobText(job, "pp_microbatches").empty()) {
      absl::StatusOr<int64_t> microbatches = LayoutSize(job, "pp_microbatches");
      if (!microbatches.ok()) return microbatches.status();
      args.insert(args.end(), {"--pp-microbatches", std::to_string(*microbatches)});
    }
  }
  if (ep > 1) args.insert(args.end(), {"--ep", std::to_string(ep)});
  if (cp > 1) args.insert(args.end(), {"--cp", std::to_string(cp)});
  const int64_t world = pp * dp * tp * cp;
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("the log's rank ", rank,
                                                   " is outside the recorded job's ", world,
                                                   " ranks (job.pp x job.dp x job.tp x job.cp)"));
  }
  args.insert(args.end(), {"--world-size", std::to_string(world), "--rank", std::to_string(rank)});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PredictArguments(
    const std::string& record, const std::string& config_path, const std::string& out_path,
    const std::string& gpu, const std::string& conf, int steps, int32_t rank) {
  absl::StatusOr<Json> json = estimator::ParseJson(record);
  if (!json.ok()) return json.status();
  auto config = json->find("config");
  auto job_it = json->find("job");
  if (config == json->end() || !config->is_object()) {
    return absl::InvalidArgumentError("the model record has no config object");
  }
  const Json job = job_it != json->end() && job_it->is_object() ? *job_it : Json::object();
  {
    std::ofstream out(config_path);
    out << config->dump();
    if (!out.flush()) return absl::InternalError(absl::StrCat(config_path, ": cannot write"));
  }
  std::vector<std::string> args = {"--config", config_path, "--out",   out_path,
                                   "--gpu",    gpu,         "--steps", std::to_string(steps)};
  if (!conf.empty()) args.insert(args.end(), {"--conf", conf});
  const std::string mode = JobText(job, "mode");
  const bool inference = mode == "inference";
  if (!mode.empty() && mode != "training" && !inference) {
    return absl::InvalidArgumentError(absl::StrCat("job.mode \"", Excerpt(mode), "\""));
  }
  if (inference) args.insert(args.end(), {"--mode", "inference"});
  // A generation's record names its prompt and new tokens (its context is what the cache ends
  // with: prompt + new tokens - 1); it is predicted by generate again, not by one forward.
  const std::string new_tokens = inference ? JobText(job, "new_tokens") : "";
  if (!new_tokens.empty()) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(new_tokens, &n) || n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job.new_tokens \"", Excerpt(new_tokens), "\" is not a positive integer"));
    }
    args.insert(args.end(), {"--generate", std::to_string(n)});
    if (const std::string cache = JobText(job, "cache"); !cache.empty()) {
      if (cache != "dynamic" && cache != "static") {
        return absl::InvalidArgumentError(absl::StrCat(
            "job.cache \"", Excerpt(cache), "\" is not one the predictor runs (dynamic, static)"));
      }
      args.insert(args.end(), {"--cache", cache});
    }
  }
  const char* seq_key = !new_tokens.empty() ? "prompt" : inference ? "context" : "seq";
  const char* batch_key = inference ? "batch" : "micro_batch";
  const std::string seq = JobText(job, seq_key);
  const std::string batch = JobText(job, batch_key);
  if (seq.empty() || batch.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the record's job has no job.",
                                                   seq.empty() ? seq_key : batch_key,
                                                   " (the job's first forward records it)"));
  }
  args.insert(args.end(), {"--seq", seq, "--micro-batch", batch});
  if (const std::string dtype = JobText(job, "dtype"); !dtype.empty()) {
    args.insert(args.end(), {"--dtype", dtype});
  }
  if (const std::string optimizer = JobText(job, "optimizer"); !optimizer.empty() && !inference) {
    if (optimizer != "adamw" && optimizer != "adamw-fused" && optimizer != "adamw-foreach" &&
        optimizer != "sgd" && optimizer != "none") {
      return absl::InvalidArgumentError(absl::StrCat(
          "job.optimizer \"", Excerpt(optimizer),
          "\" is not one the predictor runs (adamw, adamw-fused, adamw-foreach, sgd, none)"));
    }
    args.insert(args.end(), {"--optimizer", optimizer});
  }
  if (const std::string attention = JobText(job, "attention"); !attention.empty()) {
    // FlashAttention runs through SDPA's flash kernel in the predictor.
    args.insert(args.end(), {"--attention", attention == "flash" ? "sdpa" : attention});
  }
  if (const std::string recompute = JobText(job, "recompute");
      !recompute.empty() && recompute != "none") {
    args.push_back("--recompute");
  }
  if (absl::Status s = AddLayout(job, rank, args); !s.ok()) return s;
  return args;
}

void PredictBeside(const AnalysisOptions& options, RankReport& report) {
  if (report.model_record.empty()) {
    report.warnings.push_back(absl::StrCat(
        kWarning,
        "the log has no model record (fragscope.record_model(model) or observe(model=...) "
        "writes one): there is no job to predict"));
    return;
  }
  ScratchDirectory scratch;
  if (scratch.path().empty()) {
    report.warnings.push_back(absl::StrCat(kWarning, "cannot make a temporary directory"));
    return;
  }
  const std::string config = scratch.path() + "/config.json";
  const std::string log = scratch.path() + "/prediction.fslog";
  const std::string output = scratch.path() + "/predict.out";
  // As many steps as the log ran (its forward phases), so that its phases line up with the
  // prediction's.
  int steps = 0;
  for (const PhaseFigures& p : report.phases) steps += PhaseKindOf(p.phase) == "forward";
  absl::StatusOr<std::vector<std::string>> args =
      PredictArguments(report.model_record, config, log, GpuOf(options), report.options,
                       std::max(steps, 1), report.info.rank);
  if (!args.ok()) {
    report.warnings.push_back(absl::StrCat(
        kWarning, "the log's model record: ", args.status().message(), " (nothing predicted)"));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> code = RunPythonChild("predict", *args, output);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!code.ok() || *code != 0) {
    report.warnings.push_back(absl::StrCat(
        kWarning, "the prediction did not run (",
        code.ok() ? absl::StrCat("exit ", *code, ": ", Tail(output)) : code.status().message(),
        "); the estimator's footprint stands in, where the model is known (needs Python 3 with "
        "torch and transformers: FRAGSCOPE_PYTHON)"));
    return;
  }
  AnalysisOptions predicted = options;
  predicted.model.reset();
  predicted.model_json.reset();
  predicted.at_index.reset();
  predicted.run_sweep = false;
  predicted.progress = nullptr;
  predicted.conf.reset();  // the prediction ran under the log's settings: its own header's
  absl::StatusOr<AnalysisReport> analyzed = AnalyzeTraces({log}, predicted);
  if (!analyzed.ok() || analyzed->ranks.empty()) {
    report.warnings.push_back(absl::StrCat(
        kWarning, "the predicted log could not be analyzed: ",
        analyzed.ok() ? std::string("no trace") : std::string(analyzed.status().message())));
    return;
  }
  report.prediction = CompareReports(report, "the log", analyzed->ranks.front(), "predicted");
  report.prediction->title = "Beside the prediction of the log's recorded job";
  std::vector<std::string> shown = {"fragscope", "predict"};
  for (const std::string& a : *args) {
    shown.push_back(a == config ? "<the record's config>" : a == log ? "<a temporary .fslog>" : a);
  }
  report.prediction->b_origin = absl::StrJoin(shown, " ");
  report.prediction->b_seconds = seconds;
}

}  // namespace fragscope::cli
