#include "estimator/autocast_activations.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "estimator/autocast_parallel.h"
#include "estimator/parallel_layout.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

constexpr char kSource[] =
    "fragscope: transformers' eager modules under torch.autocast, saved tensors measured on an "
    "H100 (estimator/autocast_activations.h; scripts/gpu/activation_probe.py)";

// The parts of one layer, in bytes.
struct AutocastLayer {
  double norms = 0;
  double qk_norms = 0;
  double casts = 0;
  double attention = 0;
  double scores = 0;
  double mlp = 0;      // the dense MLP, or an MoE layer's shared expert and its gate
  double router = 0;   // MoE: the router's softmax and the top-k choice
  double experts = 0;  // MoE: the routed tokens' expert tensors (fp32)
  double dropout = 0;

  double total() const {
    return norms + qk_norms + casts + attention + scores + mlp + router + experts + dropout;
  }
};

// N: bytes per element of s b h that one norm saves: LayerNorm's kernel its fp32 input (4), the
// Python RMSNorm its fp32 input and normalized tensor (8), Cohere's Python LayerNorm three fp32
// tensors of s b h (12, as scripts/estimator/saved_tensors_probe.py lists them).
double NormBytes(const ModelSpec& spec) {
  if (spec.model_type == "cohere") return 12.0;
  return spec.norm == NormKind::kLayerNorm ? 4.0 : 8.0;
}

// Bytes per element of s b f that a dense MLP of width f saves (E = 2).
double MlpBytes(const ModelSpec& spec, double e) {
  if (spec.gated_mlp) return 4.0 * e;           // gate, up, the activation, the product
  if (spec.python_gelu) return 2.0 * e + 12.0;  // fc out, three fp32 intermediates, the cast
  if (spec.activation == "relu") return e;      // relu's output is fc2's input
  return 2.0 * e;                               // fc out and the activation's output
}

// Projections that read the normalized block input, each with its own 16-bit cast of it.
double InputCasts(const ModelSpec& spec, bool moe_layer) {
  double casts = spec.is_mla() ? 2.0 : (spec.fused_qkv ? 1.0 : 3.0);  // MLA: q_a and kv_a
  if (!moe_layer) return casts + (spec.gated_mlp && !spec.fused_gate_up ? 2.0 : 1.0);
  casts += 1.0;  // the router
  if (spec.shared_expert_ffn_size > 0) casts += 2.0 + (spec.shared_expert_gate ? 1.0 : 0.0);
  return casts;
}

// Whether SDPA runs PyTorch's math kernel: Falcon passes its one (or few) key/value heads to
// scaled_dot_product_attention without enable_gqa, and with fewer key heads than query heads
// neither flash nor the memory-efficient kernel accepts the inputs (sdp_utils' head-count
// check; fragscope's predictor makes the same choice, hooks/python/fragscope/predictor/kernels.py).
bool SdpaRunsMath(const ModelSpec& spec) {
  return spec.model_type == "falcon" && spec.kv_heads() < spec.num_heads;
}

AutocastLayer Layer(const ModelSpec& spec, const TrainingConfig& config, bool moe_layer) {
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double a = static_cast<double>(spec.num_heads);
  const double q = static_cast<double>(spec.query_width());
  const double k = static_cast<double>(spec.kv_width());
  const double e = WeightBytes(config.precision);
  const double m = config.dropout ? 1.0 : 0.0;
  AutocastLayer layer;
  layer.norms = static_cast<double>(spec.norms_per_layer) * NormBytes(spec) * s * b * h;
  // A q/k norm reads a 16-bit projection: it saves an fp32 copy and the 16-bit normalized
  // tensor (6 bytes per element) of the queries and of the keys.
  if (spec.qk_norm != QkNorm::kNone) layer.qk_norms = 6.0 * s * b * (q + k);
  layer.casts = e * s * b * h * InputCasts(spec, moe_layer);
  if (spec.is_mla()) {
    // DeepSeek's MLA: q (a d_h), the expanded k (a d_h), kv_b's output (a (d_h - d_r + d_v),
    // v is a view of it), the attention output (a d_v); the q_a and kv_a norms save an fp32
    // copy, the 16-bit normalized tensor and its cast for q_b / kv_b (8 bytes per element).
    const double d_h = static_cast<double>(spec.head_dimension());
    const double d_r = static_cast<double>(spec.qk_rope_head_dim);
    const double d_v = static_cast<double>(spec.value_head_dim());
    const double r = static_cast<double>(spec.q_lora_rank + spec.kv_lora_rank);
    layer.attention = e * s * b * a * (2.0 * d_h + (d_h - d_r + d_v) + d_v) + 8.0 * s * b * r;
  } else if (SdpaRunsMath(spec)) {
    // The math kernel upcasts to fp32 and saves the scaled queries, the keys and values as
    // broadcast (one head's storage each) and the softmax (below); the output's 16-bit cast is
    // the output projection's input.
    layer.attention = e * s * b * q + 4.0 * s * b * (q + 2.0 * k);
  } else {
    layer.attention = e * s * b * (spec.fused_qkv ? 2.0 * q + 4.0 * k : 2.0 * q + 2.0 * k);
  }
  if (SdpaRunsMath(spec)) {
    layer.scores = 4.0 * a * s * s * b;  // the fp32 softmax (Falcon's attention dropout is 0)
  } else if (!config.flash_attention) {
    layer.scores = a * s * s * b * (4.0 + e + m);
  }
  if (moe_layer) {
    const double experts = static_cast<double>(spec.num_experts);
    const double top_k = static_cast<double>(spec.experts_top_k);
    const double fe = static_cast<double>(spec.expert_ffn());
    const double tokens = s * b * top_k;  // T: routed (token, expert) pairs
    // Router: the fp32 softmax over E, the top-k indices (int64) and weights (fp32), and per
    // routed pair the grouping's three int64 indices, an fp32 weight and a bool mask.
    layer.router = 4.0 * s * b * experts + 12.0 * s * b * top_k + 29.0 * tokens;
    // transformers 5's experts run their grouped matmuls on the fp32 parameters without
    // autocast: per routed pair the gathered input and the down projection's output (h), the
    // gate-up output (2 f_e), the activation and the product (f_e), all fp32.
    layer.experts = 4.0 * tokens * (4.0 * fe + 2.0 * h);
    if (spec.shared_expert_ffn_size > 0) {
      const double fs = static_cast<double>(spec.shared_expert_ffn_size);
      layer.mlp = 4.0 * e * s * b * fs;
      if (spec.shared_expert_gate) layer.mlp += e * s * b * h;  // the output the gate scales
    }
  } else {
    layer.mlp = MlpBytes(spec, e) * s * b * static_cast<double>(spec.ffn());
  }
  layer.dropout = 2.0 * m * s * b * h;
  // A pipeline stage's explicit causal mask makes SDPA run its memory-efficient kernel, which
  // keeps a 16-bit copy of the queries' size beside the flash kernel's tensors.
  if (config.layout.pp > 1 && layer.scores == 0 && !spec.is_mla()) layer.attention += e * s * b * q;
  // Sequence parallelism (autocast_parallel.h): everything is a sequence or head/hidden shard
  // but the projections' casts of the all-gathered input.
  const double t = static_cast<double>(config.layout.tp);
  for (double* part : {&layer.norms, &layer.qk_norms, &layer.attention, &layer.scores, &layer.mlp,
                       &layer.router, &layer.experts, &layer.dropout}) {
    *part /= t;
  }
  return layer;
}

// The term for `count` layers of one kind: their total, and every part that is not zero by
// name in the formula and the values.
Term LayerTerm(const char* key, absl::string_view what, const AutocastLayer& layer, double count,
               absl::string_view in_flight = "") {
  const std::pair<const char*, double> parts[] = {
      {"norms", layer.norms},         {"qk_norms", layer.qk_norms}, {"casts", layer.casts},
      {"attention", layer.attention}, {"scores", layer.scores},     {"mlp", layer.mlp},
      {"router", layer.router},       {"experts", layer.experts},   {"dropout", layer.dropout}};
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (const auto& [name, bytes] : parts) {
    if (bytes == 0) continue;
    names.push_back(name);
    values.push_back(FormatCount(bytes));
  }
  Term term;
  term.key = key;
  term.label = absl::StrCat("activations (", FormatNumber(count), " ", what, ")");
  term.value = layer.total() * count;
  term.formula = absl::StrCat(in_flight.empty() ? "per_layer * L" : "per_layer * L_r * k",
                              ";  per_layer = ", absl::StrJoin(names, " + "),
                              " (estimator/autocast_activations.h)");
  term.values = absl::StrCat(FormatCount(layer.total()), " * ", FormatNumber(count),
                             ";  per_layer = ", absl::StrJoin(values, " + "), " = ",
                             FormatCount(layer.total()));
  if (!in_flight.empty()) absl::StrAppend(&term.values, ";  k = ", in_flight);
  term.source = kSource;
  return term;
}

absl::Status Unsupported(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("activation-model torch-autocast describes eager PyTorch jobs on one GPU or "
                   "as torchtitan splits them: ",
                   what, " is not modelled (use activation-model korthikanti)"));
}

absl::Status CheckSupported(const ModelSpec& spec, const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      RequireArchitecture(spec, "activations (or pass --no-activations)"));
  const ParallelLayout& l = config.layout;
  if (config.precision == Precision::kFp32) return Unsupported("precision fp32 (no autocast)");
  if (l.tp > 1 && !l.sequence_parallel) {
    return Unsupported(
        absl::StrCat("tp = ", l.tp, " without sequence parallelism (torchtitan's plan: pass sp)"));
  }
  if (l.sequence_parallel && l.tp == 1) return Unsupported("sequence parallelism with tp = 1");
  if ((l.tp > 1 || l.pp > 1) && (spec.is_moe() || spec.is_mla() || SdpaRunsMath(spec))) {
    return Unsupported(absl::StrCat(l.tp > 1 ? "tp" : "pp", " > 1 on ", spec.model_type,
                                    " (measured on Llama-family dense decoders)"));
  }
  if (l.tp > 1 && l.pp > 1) return Unsupported("tp > 1 with pp > 1");
  if (config.recompute == Recompute::kSelective) {
    return absl::InvalidArgumentError(
        "activation-model torch-autocast with recompute selective: selective recompute is "
        "Megatron's (the attention core only); transformers checkpoints whole layers (recompute "
        "full), and that is not modelled either (use activation-model korthikanti)");
  }
  if (config.recompute == Recompute::kFull) {
    // What a checkpointed step keeps was never measured, and its peak moves: not one formula.
    return absl::InvalidArgumentError(
        "activation-model torch-autocast with recompute full is not modelled: its tensors were "
        "measured in steps without activation checkpointing, and under checkpointing the peak "
        "moves (every layer's saved input, one layer's recomputed tensors, and the gradients "
        "that the backward now accumulates while it frees less), which no measurement has "
        "placed; use activation-model korthikanti, whose recompute terms are Korthikanti's");
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<Term> AttentionBackwardTerm(const ModelSpec& spec, const TrainingConfig& config) {
  if (!spec.has_architecture() || spec.moe_layers() == spec.num_layers || config.layout.tp > 1 ||
      config.layout.pp > 1) {
    return std::nullopt;  // measured on one GPU's step
  }
  const AutocastLayer layer = Layer(spec, config, false);
  if (layer.scores == 0 || spec.is_mla()) return std::nullopt;
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double v = static_cast<double>(spec.vocab_size);
  const double a = static_cast<double>(spec.num_heads);
  const double q = static_cast<double>(spec.query_width());
  const double f = static_cast<double>(spec.ffn());
  const double e = WeightBytes(config.precision);
  const double w_mlp = (spec.gated_mlp ? 3.0 : 2.0) * h * f;
  const double w_o = q * h;
  const double c_mlp = spec.gated_mlp && !spec.fused_gate_up ? 2.0 : 1.0;
  const double scores = 4.0 * a * s * s * b;
  const double allocated = 4.0 * v * h + 4.0 * (w_mlp + w_o) + 8.0 * s * b * h + 2.0 * scores;
  const double freed =
      2.0 * v * h + 2.0 * (w_mlp + w_o) + layer.mlp + e * s * b * h * c_mlp + e * s * b * q;
  Term term;
  term.key = "attention_backward";
  term.label = "last layer's attention backward (fp32 score gradients, less what is freed)";
  // What the moment adds over the backward's start; at short sequences it frees more than it
  // allocates, and then that moment is below the backward's start (never the peak): 0.
  term.value = std::max(0.0, allocated - freed);
  term.formula =
      "max(0, 4 V h + 4 (W_mlp + W_o) + 8 s b h + 2 (4 a s^2 b) - [2 V h + 2 (W_mlp + W_o) + mlp + "
      "E s b h c_mlp + E s b q])";
  term.values = absl::StrFormat(
      "%s + 4 * (%s + %s) + %s + 2 * %s - [%s + 2 * (%s + %s) + %s + %s + %s]",
      FormatCount(4.0 * v * h), FormatCount(w_mlp), FormatCount(w_o), FormatCount(8.0 * s * b * h),
      FormatCount(scores), FormatCount(2.0 * v * h), FormatCount(w_mlp), FormatCount(w_o),
      FormatCount(layer.mlp), FormatCount(e * s * b * h * c_mlp), FormatCount(e * s * b * q));
  term.source =
      "fragscope: the predictor's allocations of a Falcon step (SDPA's math kernel), at its "
      "backward peak";
  term.at_backward_start = false;
  term.at_backward_end = false;
  term.at_optimizer_step = false;
  term.at_attention_backward = true;
  return term;
}

double AutocastBytesPerLayer(const ModelSpec& spec, const TrainingConfig& config) {
  return Layer(spec, config, spec.is_moe() && spec.dense_layers == 0).total();
}

absl::StatusOr<std::vector<Term>> AutocastActivationTerms(const ModelSpec& spec,
                                                          const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(CheckSupported(spec, config));
  const ParallelLayout& layout = config.layout;
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double h = static_cast<double>(spec.hidden_size);
  const double v = static_cast<double>(spec.vocab_size);
  const double t = static_cast<double>(layout.tp);
  const double e = WeightBytes(config.precision);
  const double m = config.dropout ? 1.0 : 0.0;
  const bool pipeline = layout.pp > 1;
  // Micro-batches in flight on this rank (1 without a pipeline) and those of the output layer.
  const double k = AutocastMicroBatchesInFlight(layout);
  const double k_out = layout.schedule == PipelineSchedule::kGpipe
                           ? static_cast<double>(PipelineMicroBatches(layout))
                           : 1.0;
  const std::string in_flight = pipeline ? InFlightValues(layout) : "";
  const double moe_layers = static_cast<double>(spec.moe_layers());
  const double rank_layers = pipeline ? static_cast<double>(LayersOnFirstStage(spec, layout))
                                      : static_cast<double>(spec.num_layers);
  const double dense_layers = rank_layers - moe_layers;  // pp > 1: dense models only
  std::vector<Term> terms;

  if (dense_layers > 0) {
    const char* what = spec.is_moe() ? "dense layers, torch.autocast" : "layers, torch.autocast";
    Term layers =
        LayerTerm("activations", what, Layer(spec, config, false), dense_layers * k, in_flight);
    if (pipeline) {
      layers.label = absl::StrCat("activations (", FormatNumber(dense_layers), " layers x ",
                                  FormatNumber(k), " micro-batches in flight, torch.autocast)");
    }
    terms.push_back(std::move(layers));
  }
  if (moe_layers > 0) {
    terms.push_back(LayerTerm("activations_moe", "MoE layers, torch.autocast",
                              Layer(spec, config, true), moe_layers));
  }

  // Token ids on the first rank; a pipeline stage's bool causal mask on every rank; per
  // micro-batch in flight.
  const double ids = HoldsEmbedding(layout) ? 8.0 * s * b + m * s * b * h / t : 0.0;
  const double mask = pipeline ? b * s * s : 0.0;
  Term embedding;
  embedding.key = "activations_embedding";
  embedding.label = pipeline ? "activations (token ids on rank 0, the stage's causal mask)"
                             : "activations (token ids + embedding dropout mask)";
  embedding.value = (ids + mask) * k;
  embedding.formula = pipeline ? "(8 s b [rank 0] + b s^2) k" : "8 s b + m s b h / t";
  embedding.values = pipeline
                         ? absl::StrFormat("(%s + %s) * %g", FormatCount(ids), FormatCount(mask), k)
                         : absl::StrFormat("8 * %s * %s + %s * %s * %s * %s / %s", FormatNumber(s),
                                           FormatNumber(b), FormatNumber(m), FormatNumber(s),
                                           FormatNumber(b), FormatNumber(h), FormatNumber(t));
  embedding.source = kSource;
  terms.push_back(embedding);
  if (const double held = HeldStageOutputs(layout); held > 0) {
    Term outputs;
    outputs.key = "activations_stage_outputs";
    outputs.label = "activations (the stage outputs kept for the backward, fp32)";
    outputs.value = 4.0 * s * b * h * held;
    outputs.formula = "4 s b h n_out  (n_out: estimator/autocast_parallel.h)";
    outputs.values = absl::StrFormat("4 * %s * %s * %s * %g", FormatNumber(s), FormatNumber(b),
                                     FormatNumber(h), held);
    outputs.source = "torch.distributed.pipelining's PipelineStage, seen in fragscope's predictor";
    terms.push_back(outputs);
  }
  if (!HoldsOutputLayer(layout)) return terms;

  const double norm = NormBytes(spec);
  // Soft-capped logits (cap * tanh(logits / cap)) keep the tanh's output, in the compute dtype.
  const double capped = spec.logit_softcapping ? e : 0.0;
  Term output;
  output.key = "activations_output";
  output.label = spec.logit_softcapping
                     ? "activations (output layer + soft-capping tanh + loss: fp32 log-softmax)"
                     : "activations (output layer + loss: fp32 log-softmax)";
  output.value = ((4.0 + capped) * s * b * v / t + (norm / t + e) * s * b * h) * k_out;
  output.formula = absl::StrCat(spec.logit_softcapping ? "(4 + E) s b V / t + (N / t + E) s b h"
                                                       : "4 s b V / t + (N / t + E) s b h",
                                k_out > 1 ? ", times the m micro-batches GPipe holds" : "");
  output.values =
      absl::StrFormat("(%s * %s * %s * %s / %s + (%s / %s + %s) * %s * %s * %s) * %s",
                      FormatNumber(4.0 + capped), FormatNumber(s), FormatNumber(b), FormatNumber(v),
                      FormatNumber(t), FormatNumber(norm), FormatNumber(t), FormatNumber(e),
                      FormatNumber(s), FormatNumber(b), FormatNumber(h), FormatNumber(k_out));
  output.source = kSource;
  terms.push_back(output);

  Term backward;
  backward.key = "loss_backward";
  if (layout.tp > 1) {
    backward.label =
        "loss-parallel cross-entropy (16-bit and fp32 logits shards, a second fp32 "
        "log-softmax shard)";
    backward.value = 10.0 * s * b * v / t;
    backward.formula = "10 s b V / t";
    backward.values = absl::StrFormat("10 * %s * %s * %s / %s", FormatNumber(s), FormatNumber(b),
                                      FormatNumber(v), FormatNumber(t));
    backward.source = absl::StrCat(
        kSource,
        "; torch's loss_parallel() under fragscope's predictor: its forward holds "
        "these beside the saved log-softmax and the layers' tensors (the step's peak)");
  } else {
    backward.label = "loss backward (two fp32 logits gradients at once)";
    backward.value = 8.0 * s * b * v;
    backward.formula = "8 s b V";
    backward.values =
        absl::StrFormat("8 * %s * %s * %s", FormatNumber(s), FormatNumber(b), FormatNumber(v));
    backward.source = absl::StrCat(kSource, "; the step's peak is at the start of the backward");
  }
  terms.push_back(backward);
  if (std::optional<Term> outputs = PipelineOutputsTerm(spec, config)) {
    terms.push_back(*std::move(outputs));
  }
  return terms;
}

}  // namespace fragscope::estimator
