#include "estimator/inference_memory.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "estimator/autocast_parallel.h"
#include "estimator/parameter_count.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {

absl::Status ValidateInferenceConfig(const InferenceConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireSequenceOrBatch("batch", config.batch, 1));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireSequenceOrBatch("context", config.context, 0));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireSequenceOrBatch("prompt", config.prompt_tokens, 0));
  if (!(config.overhead_factor >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("overhead-factor = ", config.overhead_factor, " must be >= 1"));
  }
  if (config.overheads.cuda_context_bytes < 0 || config.overheads.workspace_bytes < 0) {
    return absl::InvalidArgumentError("cuda-context-mib and workspace-mib must not be negative");
  }
  return absl::OkStatus();
}

int64_t KvHeadsPerRank(const ModelSpec& spec, const ParallelLayout& layout) {
  const int64_t g = spec.kv_heads();
  return g >= layout.tp ? g / layout.tp : 1;
}

double KvCacheBytesPerToken(const ModelSpec& spec, DType kv_cache, const ParallelLayout& layout) {
  return 2.0 * static_cast<double>(LayersOnFirstStage(spec, layout)) *
         static_cast<double>(KvHeadsPerRank(spec, layout)) *
         static_cast<double>(spec.head_dimension()) * BytesPerElement(kv_cache);
}

absl::StatusOr<MemoryEstimate> EstimateInference(const ModelSpec& spec,
                                                 const InferenceConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const ParameterCount count, CountParameters(spec));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ValidateInferenceConfig(config));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      ValidateParallelLayout(config.layout, spec, LayoutUse::kInference));
  if (config.context > 0 && config.use_kv_cache) {
    FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
        RequireArchitecture(spec, "the KV cache (use --context 0 for weights only)"));
  }
  const ParallelLayout& layout = config.layout;
  const ParameterShard shard = ShardParameters(spec, count, layout);
  const double weight_bytes = BytesPerElement(config.weights);

  MemoryEstimate estimate;
  estimate.model_name = spec.name;
  estimate.total_parameters = count.total;
  estimate.parameters_on_gpu = shard.total();
  const std::string weights_held =
      config.autocast.has_value() && *config.autocast != config.weights
          ? absl::StrFormat("%s under %s autocast", DTypeName(config.weights),
                            DTypeName(*config.autocast))
          : std::string(DTypeName(config.weights));
  estimate.workload =
      config.use_kv_cache
          ? absl::StrFormat(
                "inference: weights %s, KV cache %s, batch %d, context %d tokens; tp %d x pp %d",
                weights_held, DTypeName(config.kv_cache), config.batch, config.context, layout.tp,
                layout.pp)
          : absl::StrFormat(
                "inference: weights %s, no KV cache (one forward of batch %d x %d tokens); tp %d "
                "x pp %d",
                weights_held, config.batch, config.context, layout.tp, layout.pp);

  Term weights;
  weights.key = "weights";
  weights.label = absl::StrCat("weights (", DTypeName(config.weights), ")");
  weights.value = shard.total() * weight_bytes;
  weights.formula = "P_local * bytes(dtype)";
  weights.values = absl::StrCat(FormatCount(shard.total()), " * ", FormatNumber(weight_bytes));
  weights.source = "Transformer Math 101 (EleutherAI 2023); accelerate estimate.py dtype table";
  estimate.terms.push_back(weights);

  if (spec.has_architecture() && config.use_kv_cache) {
    const double per_token = KvCacheBytesPerToken(spec, config.kv_cache, layout);
    Term kv;
    kv.key = "kv_cache";
    kv.label = absl::StrCat("KV cache (", DTypeName(config.kv_cache), ", ", config.batch, " x ",
                            config.context, " tokens)");
    kv.value = per_token * static_cast<double>(config.context) * static_cast<double>(config.batch);
    kv.formula = "2 * L_s * g_rank * d_h * bytes(kv) * context * batch";
    kv.values = absl::StrFormat("2 * %d * %d * %d * %s * %d * %d", LayersOnFirstStage(spec, layout),
                                KvHeadsPerRank(spec, layout), spec.head_dimension(),
                                FormatNumber(BytesPerElement(config.kv_cache)), config.context,
                                config.batch);
    kv.source =
        "docs/estimator_reference.md §5 (K and V; GQA g; max(g/t, 1) per rank as llm-analysis)";
    estimate.terms.push_back(kv);
    Term per_token_term{
        "kv_cache_bytes_per_token", "KV-cache bytes per token (this GPU)", per_token, Unit::kBytes,
        Placement::kDevice,         "2 * L_s * g_rank * d_h * bytes(kv)",  "",        kv.source};
    per_token_term.values = absl::StrFormat(
        "2 * %d * %d * %d * %s", LayersOnFirstStage(spec, layout), KvHeadsPerRank(spec, layout),
        spec.head_dimension(), FormatNumber(BytesPerElement(config.kv_cache)));
    estimate.quantities.push_back(per_token_term);
  }

  if (spec.has_architecture() && count.architectural && config.autocast.has_value() &&
      *config.autocast != config.weights) {
    // Weights held in another dtype than the forward's autocast (fp32 under bf16): autocast
    // casts each linear layer's weight once and caches the copy for as long as the autocast
    // region lasts, the whole of a generate (prefill and every decode step).
    const double cast = AutocastCastWeights(spec, count, layout);
    const double bytes = BytesPerElement(*config.autocast);
    Term casts;
    casts.key = "activations_autocast_weights";
    casts.label =
        absl::StrCat("autocast's ", DTypeName(*config.autocast), " weight copies (cached)");
    casts.value = bytes * cast;
    casts.formula = "bytes(autocast) * P_matmul";
    casts.values = absl::StrCat(FormatNumber(bytes), " * ", FormatCount(cast));
    casts.source =
        "torch.autocast's weight cast cache (leaf tensors, until the region exits), seen in "
        "fragscope's predictor (estimator/README.md)";
    estimate.terms.push_back(casts);
  }
  Term overhead;
  overhead.key = "overhead_rule";
  overhead.label =
      absl::StrFormat("overhead (%sx rule on weights)", FormatNumber(config.overhead_factor));
  overhead.value = (config.overhead_factor - 1.0) * weights.value;
  overhead.formula = "(factor - 1) * weights";
  overhead.values = absl::StrCat("(", FormatNumber(config.overhead_factor), " - 1) * ",
                                 FormatCount(weights.value));
  overhead.source =
      "EleutherAI Transformer Math 101: inference total ~ 1.2 x model memory (a rule of thumb, "
      "not a measured term)";
  estimate.terms.push_back(overhead);
  for (Term& term : DeviceOverheadTerms(config.overheads))
    estimate.terms.push_back(std::move(term));

  for (Term& term : ParameterQuantities(spec, count, shard)) {
    estimate.quantities.push_back(std::move(term));
  }
  if (spec.has_architecture() && spec.kv_heads() < layout.tp) {
    estimate.notes.push_back("tp exceeds num_kv_heads: each rank holds one replicated KV head");
  }
  if (std::optional<std::string> note = PastPositionsNote(spec, "context", config.context)) {
    estimate.notes.push_back(*std::move(note));
  }
  return estimate;
}

}  // namespace fragscope::estimator
