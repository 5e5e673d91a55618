#include "analysis/explain/model_job.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "analysis/explain/recorded_adapter.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec_json.h"
#include "estimator/parallel_layout.h"
#include "estimator/training_memory.h"
#include "nlohmann/json.hpp"

namespace fragscope {
namespace {

namespace est = ::fragscope::estimator;
using Json = nlohmann::json;

// A config.json is a few KiB; a bound keeps a path to /dev/zero from reading without end.
constexpr size_t kMaxConfigFileBytes = 16 << 20;

enum class Mode : uint8_t { kBoth, kTraining, kInference };

struct KeyInfo {
  absl::string_view key;
  Mode mode;
  absl::string_view counterpart;  // the other mode's key for the same idea, if any
};

constexpr KeyInfo kKeys[] = {
    {"train", Mode::kBoth, ""},
    {"infer", Mode::kBoth, ""},
    {"tp", Mode::kBoth, ""},
    {"pp", Mode::kBoth, ""},
    {"seq", Mode::kTraining, "context"},
    {"micro_batch", Mode::kTraining, "batch"},
    {"precision", Mode::kTraining, "dtype"},
    {"optimizer", Mode::kTraining, ""},
    {"zero", Mode::kTraining, ""},
    {"sp", Mode::kTraining, ""},
    {"dp", Mode::kTraining, ""},
    {"recompute", Mode::kTraining, ""},
    {"flash", Mode::kTraining, ""},
    {"dropout", Mode::kTraining, ""},
    {"activations", Mode::kTraining, ""},
    {"batch", Mode::kInference, "micro_batch"},
    {"context", Mode::kInference, "seq"},
    {"dtype", Mode::kInference, "precision"},
    {"kv_dtype", Mode::kInference, ""},
    {"prompt", Mode::kInference, ""},
    // A pipeline rank (a predicted log's record): the schedule, the micro-batches per step, and
    // the rank's stage indices ("1", or "1,3" with two stages per rank).
    {"pp_schedule", Mode::kTraining, ""},
    {"pp_microbatches", Mode::kTraining, ""},
    {"pp_stages", Mode::kTraining, ""},
};

const KeyInfo* FindKey(absl::string_view key) {
  for (const KeyInfo& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

absl::StatusOr<int64_t> PositiveInt(absl::string_view where, absl::string_view value) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s expects a positive integer, got '%s'", where, value));
  }
  return n;
}

absl::StatusOr<bool> ZeroOrOne(absl::string_view where, absl::string_view value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  return absl::InvalidArgumentError(absl::StrFormat("%s expects 0 or 1, got '%s'", where, value));
}

// Sets `key` (a SPEC key, already checked against the job's mode) to `value`. `where` names it
// in errors ("--model: seq", "the log's model record: job.seq").
absl::Status ApplyKey(absl::string_view key, absl::string_view value, absl::string_view where,
                      ModelJob* job) {
  est::TrainingConfig& t = job->train;
  est::InferenceConfig& i = job->infer;
  auto set_int = [&](int64_t* field) -> absl::Status {
    absl::StatusOr<int64_t> n = PositiveInt(where, value);
    if (n.ok()) *field = *n;
    return n.status();
  };
  if (key == "train" || key == "infer") return absl::OkStatus();
  if (key == "seq") return set_int(&t.seq_len);
  if (key == "micro_batch") return set_int(&t.micro_batch);
  if (key == "dp") return set_int(&t.layout.dp);
  if (key == "batch") return set_int(&i.batch);
  if (key == "context") return set_int(&i.context);
  if (key == "prompt") return set_int(&i.prompt_tokens);
  if (key == "pp_microbatches") return set_int(&t.layout.num_microbatches);
  if (key == "pp_schedule") {
    absl::StatusOr<est::PipelineSchedule> schedule =
        est::ParsePipelineSchedule(value, std::string(where));
    if (schedule.ok()) t.layout.schedule = *schedule;
    return schedule.status();
  }
  if (key == "pp_stages") {
    // Rank r holds stages r, r + pp, ...: its rank is the first, its stages per rank the count.
    std::vector<int64_t> stages;
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t stage = -1;
      if (!absl::SimpleAtoi(part, &stage) || stage < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s expects stage indices (\"1\" or \"1,3\"), got '%s'", where, value));
      }
      stages.push_back(stage);
    }
    t.layout.stage = stages.front();
    t.layout.vpp = static_cast<int64_t>(stages.size());
    return absl::OkStatus();
  }
  if (key == "tp" || key == "pp") {
    int64_t* field = key == "tp" ? &t.layout.tp : &t.layout.pp;
    if (absl::Status s = set_int(field); !s.ok()) return s;
    (key == "tp" ? i.layout.tp : i.layout.pp) = *field;
    return absl::OkStatus();
  }
  if (key == "zero") {
    int64_t zero = 0;
    if (!absl::SimpleAtoi(value, &zero) || zero < 0 || zero > 3) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s expects 0, 1, 2 or 3, got '%s'", where, value));
    }
    t.zero_stage = static_cast<int>(zero);
    return absl::OkStatus();
  }
  if (key == "flash" || key == "dropout" || key == "sp") {
    absl::StatusOr<bool> on = ZeroOrOne(where, value);
    if (on.ok()) {
      (key == "flash" ? t.flash_attention
       : key == "sp"  ? t.layout.sequence_parallel
                      : t.dropout) = *on;
    }
    return on.status();
  }
  const std::string field(where);
  if (key == "precision") {
    absl::StatusOr<est::Precision> p = est::ParsePrecision(value, field);
    if (p.ok()) t.precision = *p;
    return p.status();
  }
  if (key == "optimizer") {
    absl::StatusOr<est::OptimizerChoice> o = est::ParseOptimizerChoice(value, field);
    if (!o.ok()) return o.status();
    t.optimizer = o->optimizer;
    if (o->impl.has_value()) t.optimizer_impl = *o->impl;
    return absl::OkStatus();
  }
  if (key == "recompute") {
    absl::StatusOr<est::Recompute> r = est::ParseRecompute(value, field);
    if (r.ok()) t.recompute = *r;
    return r.status();
  }
  if (key == "activations") {
    absl::StatusOr<est::ActivationModel> a = est::ParseActivationModel(value, field);
    if (a.ok()) t.activation_model = *a;
    return a.status();
  }
  // dtype, kv_dtype
  absl::StatusOr<est::DType> d = est::ParseDType(value, field);
  if (d.ok()) (key == "dtype" ? i.weights : i.kv_cache) = *d;
  return d.status();
}

absl::Status WrongMode(absl::string_view prefix, const KeyInfo& k) {
  const bool training_key = k.mode == Mode::kTraining;
  std::string hint =
      training_key ? "it describes training (drop infer)" : "it describes inference (add infer)";
  if (!k.counterpart.empty()) {
    absl::StrAppend(
        &hint, absl::StrFormat("; %s the corresponding key is %s",
                               training_key ? "for inference" : "for training", k.counterpart));
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s%s is not a key of %s: %s", prefix, k.key,
                                                    training_key ? "inference" : "training", hint));
}

// Whether a Hugging Face config turns dropout on: any of its dropout probabilities above 0.
std::optional<bool> ConfigDropout(const Json& config) {
  static constexpr std::string_view kDropoutKeys[] = {
      "resid_pdrop",       "embd_pdrop", "attn_pdrop",          "attention_dropout",
      "hidden_dropout",    "dropout",    "hidden_dropout_prob", "attention_probs_dropout_prob",
      "activation_dropout"};
  std::optional<bool> any;
  for (std::string_view key : kDropoutKeys) {
    auto it = config.find(std::string(key));
    if (it == config.end() || !it->is_number()) continue;
    any = any.value_or(false) || it->get<double>() > 0;
  }
  return any;
}

// The architecture from a JSON text (fragscope's schema or a config.json), with the defaults a
// Hugging Face config implies. `where` prefixes errors.
absl::Status LoadSpec(absl::string_view text, absl::string_view where, ModelJob* job) {
  const Json config = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  }
  absl::StatusOr<est::ModelSpec> spec = est::ModelSpecFromJson(text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", spec.status().message()));
  }
  job->spec = *std::move(spec);
  job->hugging_face = config.contains("model_type");
  if (job->hugging_face) {
    job->train.activation_model = est::ActivationModel::kTorchAutocast;
    job->train.flash_attention = true;
    job->train.dropout = ConfigDropout(config).value_or(false);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("%s: cannot open the model JSON", path));
  std::string text(kMaxConfigFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a model JSON larger than %d MiB is not a config", path, kMaxConfigFileBytes >> 20));
  }
  return text;
}

// Lists what `given` does not cover, with the defaults in `job` (after the spec's source set
// them) and their basis.
void ListAssumptions(const std::set<std::string>& given, AssumptionBasis basis, ModelJob* job) {
  const est::TrainingConfig& t = job->train;
  const est::InferenceConfig& i = job->infer;
  auto add = [&](absl::string_view key, std::string name, std::string value,
                 AssumptionBasis default_basis) {
    const bool was_given = given.contains(std::string(key));
    job->assumptions.push_back(
        {std::move(name), std::move(value), was_given ? basis : default_basis});
  };
  // What the config reader assumed (an unknown model_type read as a Llama-style decoder).
  for (const std::string& assumed : job->spec.assumptions) {
    job->assumptions.push_back({"architecture", assumed, AssumptionBasis::kDefault});
  }
  const AssumptionBasis hf =
      job->hugging_face ? AssumptionBasis::kConfig : AssumptionBasis::kDefault;
  add("train", "mode", job->training ? "training" : "inference",
      given.contains("infer") ? basis : AssumptionBasis::kDefault);
  if (job->training) {
    add("seq", "seq", absl::StrCat(t.seq_len), AssumptionBasis::kDefault);
    add("micro_batch", "micro_batch", absl::StrCat(t.micro_batch), AssumptionBasis::kDefault);
    add("precision", "precision", std::string(est::PrecisionName(t.precision)),
        AssumptionBasis::kDefault);
    add("optimizer", "optimizer",
        absl::StrCat(est::OptimizerName(t.optimizer), " ",
                     est::OptimizerImplName(t.optimizer_impl)),
        AssumptionBasis::kDefault);
    add("activations", "activations", std::string(est::ActivationModelName(t.activation_model)),
        hf);
    add("flash", "flash attention", t.flash_attention ? "on" : "off", hf);
    add("dropout", "dropout", t.dropout ? "on" : "off", hf);
    add("recompute", "recompute", std::string(est::RecomputeName(t.recompute)),
        AssumptionBasis::kDefault);
    if (t.lora.enabled()) {
      add("lora_rank", "adapters",
          absl::StrCat(
              t.lora.qlora ? "QLoRA" : "LoRA", " r=", t.lora.rank, " on ",
              est::LoraTargetsName(t.lora.targets),
              t.lora.qlora ? (t.lora.double_quant ? ", NF4 double-quantized" : ", NF4") : ""),
          AssumptionBasis::kDefault);
    }
  } else {
    add("batch", "batch", absl::StrCat(i.batch), AssumptionBasis::kDefault);
    add("context", "context", absl::StrCat(i.context), AssumptionBasis::kDefault);
    add("dtype", "weights", std::string(est::DTypeName(i.weights)), AssumptionBasis::kDefault);
    if (i.autocast.has_value()) {
      add("autocast", "autocast", std::string(est::DTypeName(*i.autocast)),
          AssumptionBasis::kDefault);
    }
    add("kv_cache", "KV cache", i.use_kv_cache ? "held" : "none (use_cache off)",
        AssumptionBasis::kDefault);
  }
}

// The inference keys only a record has (Note [Model records]): "weight_dtype" (the dtype the
// weights are held in, fp32 under autocast), "autocast" (the forward's autocast dtype: the KV
// cache's too) and "use_cache" (false: no KV cache). Sets `given` for ListAssumptions. Returns
// false for any other key.
absl::StatusOr<bool> ApplyRecordedInferenceKey(const std::string& name, const Json& value,
                                               const std::string& where, ModelJob* job,
                                               std::set<std::string>* given) {
  est::InferenceConfig& i = job->infer;
  if (name == "use_cache") {
    if (!value.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected true or false, got %s", where, value.dump()));
    }
    i.use_kv_cache = value.get<bool>();
    given->insert("kv_cache");
    return true;
  }
  if (name != "weight_dtype" && name != "autocast") return false;
  absl::StatusOr<est::DType> d = value.is_string()
                                     ? est::ParseDType(value.get<std::string>(), where)
                                     : absl::InvalidArgumentError(absl::StrCat(
                                           where, ": expected a dtype, got ", value.dump()));
  if (!d.ok()) return d.status();
  if (name == "weight_dtype") {
    i.weights = *d;
    // Without autocast the forward, and so the KV cache, runs in the weights' dtype; a
    // record's autocast or kv_dtype decides instead, applied before or after this key.
    if (!given->contains("autocast") && !given->contains("kv_dtype")) i.kv_cache = *d;
    given->insert("dtype");
  } else {
    i.autocast = *d;
    i.kv_cache = *d;
    given->insert("autocast");
  }
  return true;
}

// A recorded job's value as SPEC text: strings as they are, numbers and booleans printed.
std::optional<std::string> ValueText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_number_integer()) return v.dump();
  return std::nullopt;
}

// Applies a recorded "job" object to `job`; `given` collects the SPEC keys it set.
absl::Status ApplyRecordedJob(const Json& recorded, absl::string_view prefix, ModelJob* job,
                              std::set<std::string>* given) {
  if (!recorded.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "job: expected an object"));
  }
  if (auto mode = recorded.find("mode"); mode != recorded.end()) {
    if (!mode->is_string() || (*mode != "training" && *mode != "inference")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sjob.mode: expected \"training\" or \"inference\", got %s", prefix, mode->dump()));
    }
    job->training = *mode == "training";
    given->insert(job->training ? "train" : "infer");
  }
  for (const auto& [name, value] : recorded.items()) {
    if (name == "mode") continue;
    const std::string where = absl::StrCat(prefix, "job.", name);
    if (job->training) {
      absl::StatusOr<bool> applied =
          ApplyRecordedAdapterKey(name, value, where, &job->train.lora, given);
      if (!applied.ok()) return applied.status();
      if (*applied) continue;
    } else {
      absl::StatusOr<bool> applied = ApplyRecordedInferenceKey(name, value, where, job, given);
      if (!applied.ok()) return applied.status();
      if (*applied) continue;
      // "dtype" is the forward's dtype; the weights' is weight_dtype's where the record has it
      // (applied by ApplyRecordedInferenceKey, in either order).
      if (name == "dtype" && recorded.contains("weight_dtype")) continue;
    }
    std::optional<std::string> text = ValueText(value);
    if (!text.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected a string or an integer, got %s", where, value.dump()));
    }
    std::string key = name;
    if (name == "recompute" && value.is_boolean()) {
      text = std::string(value.get<bool>() ? "full" : "none");  // checkpointing on or off
    } else if (name == "attention") {
      // SDPA picks flash (or memory-efficient) attention on a GPU: no s^2 tensors are kept.
      if (*text != "sdpa" && *text != "flash" && *text != "eager") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: expected \"sdpa\", \"flash\" or \"eager\", got \"%s\"", where, *text));
      }
      key = "flash";
      text = std::string(*text == "eager" ? "0" : "1");
    } else if (name == "dtype" && job->training) {
      key = "precision";
    }
    const KeyInfo* k = FindKey(key);
    if (k == nullptr) continue;  // keys of a later format version are passed over
    if (k->mode != Mode::kBoth && (k->mode == Mode::kTraining) != job->training) {
      continue;  // the other mode's keys say nothing about this job
    }
    if (absl::Status s = ApplyKey(key, *text, where, job); !s.ok()) return s;
    given->insert(key);
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view AssumptionBasisName(AssumptionBasis basis) {
  switch (basis) {
    case AssumptionBasis::kGiven:
      return "given";
    case AssumptionBasis::kRecorded:
      return "recorded";
    case AssumptionBasis::kConfig:
      return "Hugging Face config";
    case AssumptionBasis::kDefault:
      return "default";
  }
  return "default";
}

absl::StatusOr<ModelJob> ParseModelSpec(absl::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string name(spec.substr(0, colon));
  ModelJob job;
  job.origin = absl::StrCat("--model ", spec);
  if (absl::EndsWith(name, ".json")) {
    absl::StatusOr<std::string> text = ReadConfigFile(name);
    if (!text.ok()) return text.status();
    if (absl::Status s = LoadSpec(*text, name, &job); !s.ok()) return s;
  } else {
    absl::StatusOr<est::ModelSpec> preset = est::FindModelPreset(name);
    if (!preset.ok()) return preset.status();
    job.spec = *std::move(preset);
  }
  std::vector<std::pair<std::string, std::string>> items;
  if (colon != absl::string_view::npos) {
    for (absl::string_view item : absl::StrSplit(spec.substr(colon + 1), ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
      const KeyInfo* k = FindKey(kv.first);
      if (k == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--model: unknown key '%s' (keys: %s)", kv.first, kModelSpecKeys));
      }
      if (kv.first == "infer") job.training = false;
      if (kv.first == "train") job.training = true;
      items.push_back(std::move(kv));
    }
  }
  std::set<std::string> given;
  for (const auto& [key, value] : items) {
    const KeyInfo& k = *FindKey(key);
    if (k.mode != Mode::kBoth && (k.mode == Mode::kTraining) != job.training) {
      return WrongMode("--model: ", k);
    }
    if (absl::Status s = ApplyKey(key, value, absl::StrCat("--model: ", key), &job); !s.ok()) {
      return s;
    }
    given.insert(key);
  }
  ListAssumptions(given, AssumptionBasis::kGiven, &job);
  return job;
}

absl::StatusOr<ModelJob> ModelJobFromRecord(absl::string_view json) {
  constexpr absl::string_view kPrefix = "the log's model record: ";
  const Json record = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kPrefix, "not a JSON object"));
  }
  const auto format = record.find("format");
  if (format == record.end() || !format->is_string() ||
      !absl::StartsWith(format->get<std::string>(), "fragscope.model/1")) {
    return absl::InvalidArgumentError(
        absl::StrCat(kPrefix, "format: expected \"fragscope.model/1\""));
  }
  const auto config = record.find("config");
  if (config == record.end() || !config->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kPrefix, "config: expected an object"));
  }
  ModelJob job;
  job.origin = "the log's model record";
  job.recorded = true;
  if (absl::Status s = LoadSpec(config->dump(), absl::StrCat(kPrefix, "config"), &job); !s.ok()) {
    return s;
  }
  std::set<std::string> given;
  if (auto recorded = record.find("job"); recorded != record.end()) {
    if (absl::Status s = ApplyRecordedJob(*recorded, kPrefix, &job, &given); !s.ok()) return s;
  }
  ListAssumptions(given, AssumptionBasis::kRecorded, &job);
  return job;
}

absl::StatusOr<ModelJob> ModelJobFromConfigFile(const std::string& path,
                                                const std::optional<ModelJob>& recorded) {
  absl::StatusOr<std::string> text = ReadConfigFile(path);
  if (!text.ok()) return text.status();
  ModelJob job;
  if (absl::Status s = LoadSpec(*text, path, &job); !s.ok()) return s;
  job.origin = absl::StrCat("--model-json ", path);
  if (!recorded.has_value()) {
    ListAssumptions({}, AssumptionBasis::kGiven, &job);
    return job;
  }
  // The recorded job's shape over this architecture.
  est::ModelSpec spec = job.spec;
  const bool hugging_face = job.hugging_face;
  job = *recorded;
  job.spec = std::move(spec);
  job.hugging_face = hugging_face;
  job.origin = absl::StrCat("--model-json ", path, " with the log's recorded job");
  job.recorded = false;  // the architecture was given: its errors are the user's to see
  return job;
}

absl::StatusOr<est::MemoryEstimate> EstimateModelJob(const ModelJob& job) {
  return job.training ? est::EstimateTraining(job.spec, job.train)
                      : est::EstimateInference(job.spec, job.infer);
}

absl::StatusOr<est::MemoryEstimate> EstimateFromModelSpec(absl::string_view spec) {
  absl::StatusOr<ModelJob> job = ParseModelSpec(spec);
  if (!job.ok()) return job.status();
  return EstimateModelJob(*job);
}

}  // namespace fragscope
