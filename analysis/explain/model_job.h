// ModelJob: the model a job runs and the shape of the job (training or inference, sequence,
// micro-batch, precision, ...), from which the estimator computes its theoretical footprint.
//
// Three ways in, one result:
//   --model SPEC        NAME_OR_JSON[:key=value,...]: an estimator preset or a model spec JSON
//                       (fragscope's schema or a Hugging Face config.json), then job keys
//   --model-json PATH   a config.json; the job's keys from the log's recorded model if it has one
//   recorded            the log's model record (Note [Model records] in fslog_format.h),
//                       written by fragscope.record_model() / observe(model=...) in the job:
//                       {"format": "fragscope.model/1", "config": {...a config.json...},
//                        "job": {"mode": "training"|"inference", "seq": N, "micro_batch": N,
//                                "batch": N, "context": N, "dtype": "bf16"|"fp16"|"fp32",
//                                "optimizer": "adamw"|"adamw-fused"|"adam"|"sgd"|...,
//                                "attention": "sdpa"|"flash"|"eager", "recompute": "none"|...,
//                                "activations": "torch-autocast"|"korthikanti",
//                                inference only: "weight_dtype": the dtype the weights are held
//                                in (fp32 under autocast), "autocast": the forward's autocast
//                                dtype (the KV cache's too), "use_cache": false for one forward
//                                pass without a KV cache (true for a generation, with
//                                "prompt", "new_tokens", "cache" and "kv_dtype"),
//                                training only: "lora_rank", "lora_targets", "quant": "nf4",
//                                "double_quant" (recorded_adapter.h); keys no estimate
//                                reads ("cuda_graphs", "lora_alpha", ...) are passed over}}
//
// Keys of SPEC (each belongs to one mode; a key of the other mode is a usage error that names
// the key meant):
//   both        train | infer (default train), tp, pp
//   training    seq, micro_batch, precision (fp32|fp16|bf16), optimizer, zero, dp, sp (0|1),
//               recompute (none|selective|full), flash (0|1), dropout (0|1),
//               activations (korthikanti|torch-autocast)
//   inference   batch, context, prompt, dtype, kv_dtype
//
// Defaults that depend on where the model came from: a Hugging Face config (a config.json or a
// recorded module) is an eager PyTorch job, so its activations follow the measured torch-autocast
// model, with SDPA's flash attention and the dropout its config sets (any *_pdrop / *dropout
// above 0); a preset or fragscope's own schema keeps the estimator's defaults (Korthikanti's
// formulas, no flash, dropout). Every value that was not given is listed in `assumptions`, and
// every report prints them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "estimator/inference_memory.h"
#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope {

// Where a value of the job came from.
enum class AssumptionBasis : uint8_t { kGiven, kRecorded, kConfig, kDefault };
std::string_view AssumptionBasisName(AssumptionBasis basis);  // "given", "recorded", ...

struct Assumption {
  std::string name;   // "activations", "flash attention", "seq", ...
  std::string value;  // "torch-autocast", "on", "1024"
  AssumptionBasis basis = AssumptionBasis::kDefault;
};

struct ModelJob {
  estimator::ModelSpec spec;
  bool hugging_face = false;  // the spec came from a Hugging Face config
  bool training = true;
  estimator::TrainingConfig train;
  estimator::InferenceConfig infer;
  std::string origin;     // "--model gpt2-small:seq=1024", "the log's model record", ...
  bool recorded = false;  // the job's shape came from the log's model record
  std::vector<Assumption> assumptions;
};

// The keys of SPEC, for --help and errors.
inline constexpr std::string_view kModelSpecKeys =
    "train|infer, tp, pp; training: seq, micro_batch, precision, optimizer, zero, dp, recompute, "
    "flash, dropout, activations; inference: batch, context, dtype, kv_dtype";

// --model SPEC. Errors (usage errors: exit 2) name the key or value.
absl::StatusOr<ModelJob> ParseModelSpec(absl::string_view spec);

// --model-json PATH: the config's architecture, the job from `recorded` when the log has one.
absl::StatusOr<ModelJob> ModelJobFromConfigFile(const std::string& path,
                                                const std::optional<ModelJob>& recorded);

// The log's model record. Errors name the key ("the log's model record: job.seq: ...").
absl::StatusOr<ModelJob> ModelJobFromRecord(absl::string_view json);

// ParseModelSpec then EstimateModelJob.
absl::StatusOr<estimator::MemoryEstimate> EstimateFromModelSpec(absl::string_view spec);

// The estimator's footprint of `job`.
absl::StatusOr<estimator::MemoryEstimate> EstimateModelJob(const ModelJob& job);

}  // namespace fragscope
