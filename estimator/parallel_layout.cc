#include "estimator/parallel_layout.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

#include "estimator/term.h"

namespace fragscope::estimator {
namespace {

absl::Status NotDividing(absl::string_view field, int64_t value, absl::string_view what,
                         int64_t target) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = ", value, " does not divide ", what, " = ", target));
}

}  // namespace

absl::Status ValidateParallelLayout(const ParallelLayout& layout, const ModelSpec& spec,
                                    LayoutUse use) {
  const std::pair<absl::string_view, int64_t> sizes[] = {{"tp", layout.tp},
                                                         {"pp", layout.pp},
                                                         {"dp", layout.dp},
                                                         {"ep", layout.ep},
                                                         {"vpp", layout.vpp}};
  // The bounds keep products such as gpus() = tp * pp * dp exact in int64.
  constexpr int64_t kMaxSize = int64_t{1} << 20;
  constexpr int64_t kMaxMicrobatches = int64_t{1} << 30;
  for (const auto& [field, value] : sizes) {
    if (value < 1 || value > kMaxSize) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = ", value, " must be in [1, ", kMaxSize, "]"));
    }
  }
  if (layout.num_microbatches < 0 || layout.num_microbatches > kMaxMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatches = ", layout.num_microbatches,
                                                   " must be in [0, ", kMaxMicrobatches, "]"));
  }
  if (layout.dp % layout.ep != 0) return NotDividing("ep", layout.ep, "dp", layout.dp);
  if (layout.stage < 0 || layout.stage >= layout.pp) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline rank stage = ", layout.stage,
                                                   " must be in [0, pp = ", layout.pp,
                                                   ") (--pp-rank, a record's pp_stages)"));
  }
  if (layout.schedule == PipelineSchedule::kGpipe && layout.vpp > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp-schedule gpipe with vpp = ", layout.vpp,
                     ": GPipe runs one stage per rank (interleaving is 1F1B's)"));
  }
  if (layout.vpp > 1 && layout.pp == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vpp = ", layout.vpp, " needs pp > 1 (interleaving splits pipeline stages)"));
  }
  if (!spec.has_architecture()) {
    if (layout.ep > 1) {
      return absl::InvalidArgumentError("ep > 1 needs an MoE architecture, not a bare count");
    }
    return absl::OkStatus();
  }
  if (spec.num_heads % layout.tp != 0) {
    return NotDividing("tp", layout.tp, "num_heads", spec.num_heads);
  }
  const int64_t g = spec.kv_heads();
  if (g % layout.tp != 0 && (use == LayoutUse::kTraining || layout.tp % g != 0)) {
    return NotDividing("tp", layout.tp, "num_kv_heads", g);
  }
  if (spec.ffn() % layout.tp != 0) return NotDividing("tp", layout.tp, "ffn_size", spec.ffn());
  if (layout.pp > spec.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp = ", layout.pp, " exceeds num_layers = ", spec.num_layers));
  }
  if (layout.vpp > 1 && spec.num_layers % (layout.pp * layout.vpp) != 0) {
    return NotDividing("pp * vpp", layout.pp * layout.vpp, "num_layers", spec.num_layers);
  }
  if (layout.ep > 1) {
    if (!spec.is_moe()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ep = ", layout.ep, " needs an MoE model (num_experts > 0)"));
    }
    if (spec.num_experts % layout.ep != 0) {
      return NotDividing("ep", layout.ep, "num_experts", spec.num_experts);
    }
  }
  return absl::OkStatus();
}

int64_t LayersOnFirstStage(const ModelSpec& spec, const ParallelLayout& layout) {
  return (spec.num_layers + layout.pp - 1) / layout.pp;
}

absl::string_view PipelineScheduleName(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(absl::string_view text,
                                                       absl::string_view field) {
  if (text == "gpipe") return PipelineSchedule::kGpipe;
  if (text == "1f1b" || text == "interleaved-1f1b") return PipelineSchedule::k1F1B;
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected gpipe, 1f1b or interleaved-1f1b, got '", text, "'"));
}

ParameterShard ShardParameters(const ModelSpec& spec, const ParameterCount& count,
                               const ParallelLayout& layout) {
  ParameterShard shard;
  const double t = static_cast<double>(layout.tp);
  const double p = static_cast<double>(layout.pp);
  if (!count.architectural) {
    shard.tensor_parallel = static_cast<double>(count.total) / (t * p);
    shard.formula = "P / (tp * pp)";
    shard.values = absl::StrFormat("%s / (%d * %d)", FormatCount(static_cast<double>(count.total)),
                                   layout.tp, layout.pp);
    return shard;
  }
  const double scale = count.given_count_scale();
  const int64_t stage_layers = LayersOnFirstStage(spec, layout);
  const double layers = static_cast<double>(stage_layers);
  // Dense and MoE blocks on the rank (dense layers come first), each block's parameters by kind:
  // its virtual stages' layer ranges, rank + k pp for k < vpp, of L / (pp vpp) layers each (one
  // range of ceil(L / pp) on rank 0 without interleaving).
  LayerMix mix = FirstLayers(count, stage_layers);
  if (layout.stage > 0) {
    const int64_t chunk = stage_layers / layout.vpp;
    mix = {};
    for (int64_t k = 0; k < layout.vpp; ++k) {
      const int64_t start = (layout.stage + k * layout.pp) * chunk;
      const LayerMix before = FirstLayers(count, start);
      const LayerMix through = FirstLayers(count, std::min(start + chunk, spec.num_layers));
      mix.dense += through.dense - before.dense;
      mix.moe += through.moe - before.moe;
    }
  }
  const double dense = static_cast<double>(mix.dense);
  const double moe = static_cast<double>(mix.moe);
  const bool last_stage_too = HoldsOutputLayer(layout);
  const double split_total =
      layers * static_cast<double>(count.attention_weights + count.attention_column_biases) +
      dense * static_cast<double>(count.mlp_weights + count.mlp_column_biases) +
      moe * static_cast<double>(count.shared_expert);
  const double replicated_total =
      layers * static_cast<double>(count.layer_norms + count.attention_norms +
                                   count.attention_row_biases) +
      dense * static_cast<double>(count.mlp_row_biases) +
      moe * static_cast<double>(count.router + count.shared_expert_gate);
  const double split_per_layer = split_total / layers;
  const double replicated_per_layer = replicated_total / layers;
  const double output = last_stage_too ? static_cast<double>(count.output_layer) : 0.0;
  const double final_norm = last_stage_too ? static_cast<double>(count.final_norm) : 0.0;
  const bool first = HoldsEmbedding(layout);
  const double embedding = first ? static_cast<double>(count.embedding) : 0.0;
  const double outside_replicated =
      (first ? static_cast<double>(count.position_embedding + count.embedding_norm) : 0.0) +
      final_norm;

  shard.tensor_parallel = scale * (split_total + embedding + output) / t;
  shard.replicated = scale * (replicated_total + outside_replicated);
  shard.expert = scale * moe * static_cast<double>(count.expert_parameters) /
                 (t * static_cast<double>(layout.ep));
  shard.formula =
      "(L_s * block_split + V h + out) / tp + L_s * block_replicated + outside_replicated";
  shard.values = absl::StrFormat(
      "(%s * %s + %s + %s) / %d + %s * %s + %s", FormatNumber(layers), FormatCount(split_per_layer),
      FormatCount(embedding), FormatCount(output), layout.tp, FormatNumber(layers),
      FormatCount(replicated_per_layer), FormatCount(outside_replicated));
  if (count.expert_parameters > 0) {
    shard.formula += " + L_moe,s * experts / (tp * ep)";
    shard.values += absl::StrFormat(" + %s * %s / (%d * %d)", FormatNumber(moe),
                                    FormatCount(static_cast<double>(count.expert_parameters)),
                                    layout.tp, layout.ep);
  }
  if (scale != 1.0) {
    shard.formula = "(given P / architectural P) * [" + shard.formula + "]";
    shard.values = absl::StrFormat("%s * [%s]", FormatNumber(scale), shard.values);
  }
  return shard;
}

std::vector<Term> ParameterQuantities(const ModelSpec& spec, const ParameterCount& count,
                                      const ParameterShard& shard) {
  std::vector<Term> quantities = ParameterCountTerms(spec, count);
  quantities.push_back(Term{"parameters_on_gpu", "parameters on this GPU", shard.total(),
                            Unit::kCount, Placement::kDevice, shard.formula, shard.values,
                            "Megatron theoretical_memory_usage.py sharding rules"});
  return quantities;
}

}  // namespace fragscope::estimator
