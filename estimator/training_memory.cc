#include "estimator/training_memory.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "estimator/activation_memory.h"
#include "estimator/autocast_activations.h"
#include "estimator/autocast_parallel.h"
#include "estimator/lora.h"
#include "estimator/lora_activations.h"
#include "estimator/optimizer_states.h"
#include "estimator/optimizer_step.h"
#include "estimator/overheads.h"
#include "estimator/parallel_layout.h"
#include "estimator/parameter_count.h"
#include "estimator/status_macros.h"
#include "estimator/units.h"

namespace fragscope::estimator {
namespace {

// Parameters of one kind on this GPU and the data-parallel degree ZeRO shards them over.
struct Group {
  std::string symbol;  // "P_local", "P_dense", "P_expert", "P_lora"
  double params = 0;
  double shard_degree = 1;
};

// A model-state term: sum over groups of params * bytes (/ degree when sharded).
Term StateTerm(std::string key, std::string label, const std::vector<Group>& groups,
               double bytes_per_param, bool sharded, std::string source) {
  Term term;
  term.key = std::move(key);
  term.label = std::move(label);
  term.source = std::move(source);
  std::vector<std::string> formulas;
  std::vector<std::string> values;
  for (const Group& group : groups) {
    if (group.params == 0) continue;
    const bool divide = sharded && group.shard_degree > 1;
    term.value += group.params * bytes_per_param / (divide ? group.shard_degree : 1.0);
    formulas.push_back(
        absl::StrCat(group.symbol, " * ", FormatNumber(bytes_per_param),
                     divide ? (group.symbol == "P_expert" ? " / (d/ep)" : " / d") : ""));
    values.push_back(
        absl::StrCat(FormatCount(group.params), " * ", FormatNumber(bytes_per_param),
                     divide ? absl::StrCat(" / ", FormatNumber(group.shard_degree)) : ""));
  }
  term.formula = formulas.empty() ? "0" : absl::StrJoin(formulas, " + ");
  term.values = values.empty() ? "0" : absl::StrJoin(values, " + ");
  return term;
}

// Moves `term` to the host when `offload` (label and placement).
Term Place(Term term, bool offload) {
  if (offload && term.value > 0) {
    term.placement = Placement::kHost;
    term.key = absl::StrCat("host_", term.key);
    term.label = absl::StrCat(term.label, " [CPU offload]");
    absl::StrAppend(&term.source, "; offloaded: ZeRO-Offload (Ren et al. arXiv:2101.06840)");
  }
  return term;
}

ActivationAssumptions Assumptions(const TrainingConfig& c) {
  ActivationAssumptions a;
  a.counted = c.include_activations;
  a.model = std::string(ActivationModelName(c.activation_model));
  a.recompute = std::string(RecomputeName(c.recompute));
  a.flash_attention = c.flash_attention;
  a.dropout = c.dropout;
  return a;
}

// "activations (korthikanti model): recompute none, flash attention off, dropout on".
std::string AssumptionsText(const ActivationAssumptions& a) {
  if (!a.counted) return "activations not counted";
  return absl::StrCat("activations (", a.model, " model): recompute ", a.recompute,
                      ", flash attention ", a.flash_attention ? "on" : "off", ", dropout ",
                      a.dropout ? "on" : "off");
}

// "adamw foreach"; the implementation is named for torch.optim's optimizers only.
std::string OptimizerLabel(const TrainingConfig& c) {
  if (c.optimizer == Optimizer::kAdam8Bit || c.optimizer == Optimizer::kAdafactor) {
    return std::string(OptimizerName(c.optimizer));
  }
  return absl::StrCat(OptimizerName(c.optimizer), " ", OptimizerImplName(c.optimizer_impl));
}

std::string Workload(const TrainingConfig& c, int zero_stage) {
  const ParallelLayout& l = c.layout;
  std::string precision = c.precision == Precision::kFp32
                              ? "fp32"
                              : absl::StrCat(PrecisionName(c.precision), " mixed precision, ",
                                             GradientRegimeName(c.gradients), " gradients");
  std::string sharding = c.distributed_optimizer ? "Megatron distributed optimizer"
                                                 : absl::StrCat("ZeRO-", zero_stage);
  if (c.offload_optimizer) absl::StrAppend(&sharding, " + optimizer offload");
  if (c.offload_params) absl::StrAppend(&sharding, " + parameter offload");
  std::string lora;
  if (c.lora.enabled()) {
    lora = absl::StrCat(c.lora.qlora ? ", QLoRA" : ", LoRA", " r=", c.lora.rank, " on ",
                        LoraTargetsName(c.lora.targets));
  }
  return absl::StrFormat(
      "training: %s, %s, %s%s; tp %d x pp %d x dp %d = %d GPU%s%s%s%s; seq %d, micro-batch %d; %s",
      precision, OptimizerLabel(c), sharding, lora, l.tp, l.pp, l.dp, l.gpus(),
      l.gpus() == 1 ? "" : "s", l.ep > 1 ? absl::StrCat(", ep ", l.ep) : "",
      l.vpp > 1 ? absl::StrCat(", vpp ", l.vpp) : "",
      l.sequence_parallel ? ", sequence parallel" : "", c.seq_len, c.micro_batch,
      AssumptionsText(Assumptions(c)));
}

// Sums the device terms alive at each moment of a torch-autocast step, takes the largest as the
// peak the total describes, and marks the terms not alive then.
void ChoosePeak(const TrainingConfig& config, MemoryEstimate& estimate) {
  StepPeaks peaks;
  for (const Term& term : estimate.terms) {
    if (term.placement != Placement::kDevice) continue;
    if (term.at_backward_start) peaks.backward_start += term.value;
    if (term.at_backward_end) peaks.backward_end += term.value;
    if (term.at_optimizer_step) peaks.optimizer_step += term.value;
    if (term.at_attention_backward) peaks.attention_backward += term.value;
  }
  double largest = peaks.backward_start;
  if (peaks.backward_end > largest) {
    largest = peaks.backward_end;
    peaks.peak = StepMoment::kBackwardEnd;
  }
  if (peaks.optimizer_step > largest) {
    largest = peaks.optimizer_step;
    peaks.peak = StepMoment::kOptimizerStep;
  }
  if (peaks.attention_backward > largest) peaks.peak = StepMoment::kAttentionBackward;
  for (Term& term : estimate.terms) {
    if (term.placement != Placement::kDevice) continue;
    switch (peaks.peak) {
      case StepMoment::kBackwardStart:
        term.at_peak = term.at_backward_start;
        break;
      case StepMoment::kBackwardEnd:
        term.at_peak = term.at_backward_end;
        break;
      case StepMoment::kOptimizerStep:
        term.at_peak = term.at_optimizer_step;
        break;
      case StepMoment::kAttentionBackward:
        term.at_peak = term.at_attention_backward;
        break;
    }
    if (!term.at_peak) absl::StrAppend(&term.label, " [not at the peak]");
  }
  estimate.step_peaks = peaks;
  estimate.notes.push_back(absl::StrFormat(
      "the peak is at the %s: backward start %.2f GiB (activations, the loss's gradients), "
      "backward end %.2f GiB (all gradients), optimizer step %.2f GiB (gradients, states, the "
      "update's temporaries)%s",
      StepMomentName(peaks.peak), peaks.backward_start / kGiB, peaks.backward_end / kGiB,
      peaks.optimizer_step / kGiB,
      peaks.attention_backward > 0
          ? absl::StrFormat(", last layer's attention backward %.2f GiB (stored s^2 scores)",
                            peaks.attention_backward / kGiB)
          : ""));
  if (peaks.peak == StepMoment::kBackwardStart && !config.persistent_gradients &&
      !GradientsAccumulateAcrossMicroBatches(config.layout)) {
    estimate.notes.push_back(
        "the gradients are not alive at the start of the backward: zero_grad(set_to_none=True) "
        "frees them before the forward (--persistent-grads when they are kept across "
        "micro-batches)");
  }
}

}  // namespace

absl::StatusOr<MemoryEstimate> EstimateTraining(const ModelSpec& spec,
                                                const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const ParameterCount count, CountParameters(spec));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(ValidateTrainingConfig(config));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(
      ValidateParallelLayout(config.layout, spec, LayoutUse::kTraining));
  const ParallelLayout& layout = config.layout;
  const int zero = config.distributed_optimizer ? 1 : config.zero_stage;
  const ParameterShard shard = ShardParameters(spec, count, layout);
  const double d = static_cast<double>(layout.dp);
  const double d_expert = static_cast<double>(layout.dp / layout.ep);
  const bool mixed = config.precision != Precision::kFp32;
  const double weight_bytes = WeightBytes(config.precision);

  MemoryEstimate estimate;
  estimate.model_name = spec.name;
  estimate.workload = Workload(config, zero);
  estimate.activations = Assumptions(config);
  estimate.total_parameters = count.total;
  estimate.parameters_on_gpu = shard.total();

  std::vector<Group> base = {{"P_dense", shard.dense(), d}, {"P_expert", shard.expert, d_expert}};
  if (shard.expert == 0) base = {{"P_local", shard.dense(), d}};
  std::vector<Group> trainable = base;
  const char* const zero_source = "ZeRO paper arXiv:1910.02054 sec. 5 (P_os, P_g, P_p)";

  if (config.lora.enabled()) {
    if (!spec.has_architecture()) {
      return absl::InvalidArgumentError("lora-rank needs an architecture, not a bare count");
    }
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const int64_t per_layer,
                                         LoraParametersPerLayer(spec, config.lora));
    const double layers = static_cast<double>(LayersOnFirstStage(spec, layout));
    const double lora_local =
        static_cast<double>(per_layer) * layers / static_cast<double>(layout.tp);
    trainable = {{"P_lora", lora_local, d}};
    // Frozen base weights.
    if (config.lora.qlora) {
      const double t = static_cast<double>(layout.tp);
      const int64_t mlp_matrices = spec.gated_mlp ? 3 : 2;
      const double linear_local =
          count.given_count_scale() * layers *
          (static_cast<double>(count.attention_weights + count.mlp_weights + count.router) / t +
           static_cast<double>(spec.num_experts * mlp_matrices * spec.hidden_size *
                               spec.expert_ffn()) /
               (t * static_cast<double>(layout.ep)));
      const double nf4 = Nf4BytesPerWeight(config.lora.double_quant);
      Term quantized = StateTerm(
          "weights_nf4", "weights (frozen block linears, NF4)", {{"P_linear", linear_local, d}},
          nf4, zero == 3, "QLoRA, Dettmers et al. arXiv:2305.14314 (NF4 + absmax constants)");
      Term rest = StateTerm(
          "weights", absl::StrCat("weights (frozen rest, ", PrecisionName(config.precision), ")"),
          {{"P_rest", shard.total() - linear_local, d}}, weight_bytes, zero == 3,
          "QLoRA keeps embeddings, output layer, norms and biases in 16 bits");
      estimate.terms.push_back(Place(quantized, config.offload_params));
      estimate.terms.push_back(Place(rest, config.offload_params));
    } else {
      estimate.terms.push_back(Place(
          StateTerm("weights",
                    absl::StrCat("weights (frozen base, ", PrecisionName(config.precision), ")"),
                    base, weight_bytes, zero == 3,
                    "LoRA, Hu et al. arXiv:2106.09685: the base model is frozen"),
          config.offload_params));
    }
    estimate.terms.push_back(
        Place(StateTerm("lora_weights", "LoRA adapter weights (fp32)", trainable, 4, zero == 3,
                        "PEFT keeps adapters in fp32 (autocast_adapter_dtype)"),
              config.offload_params));
    estimate.quantities.push_back(
        Term{"lora_parameters_on_gpu", "LoRA parameters on this GPU", lora_local, Unit::kCount,
             Placement::kDevice, "lora_per_layer * L_s / tp",
             absl::StrFormat("%s * %s / %d", FormatCount(static_cast<double>(per_layer)),
                             FormatNumber(layers), layout.tp),
             "Hu et al. arXiv:2106.09685: r (d_in + d_out) per matrix"});
  } else {
    Term weights =
        StateTerm("weights", absl::StrCat("weights (", PrecisionName(config.precision), ")"), base,
                  weight_bytes, zero == 3,
                  absl::StrCat(mixed ? "mixed precision: 16-bit working weights (Micikevicius et "
                                       "al. arXiv:1710.03740)"
                                     : "fp32 weights",
                               zero == 3 ? absl::StrCat("; ", zero_source) : ""));
    if (mixed && config.activation_model == ActivationModel::kTorchAutocast &&
        count.architectural) {
      // Under autocast the parameters are fp32 and the 16-bit weights are the casts the linear
      // layers save for the backward: their matrices only (not the embedding lookup, positions,
      // norms or biases; not transformers 5's experts, whose grouped matmul runs in fp32; the
      // output layer's, also when it is tied), freed by the backward: not alive in the
      // optimizer step. Measured with scripts/estimator/saved_tensors_probe.py.
      // A rank of a tp or pp job casts its share (autocast_parallel.h).
      const double cast = AutocastCastWeights(spec, count, layout);
      weights =
          StateTerm("weights",
                    absl::StrCat("weights (", PrecisionName(config.precision),
                                 " copies saved by the linear layers)"),
                    {{"P_matmul", cast * count.given_count_scale(), d}}, weight_bytes, zero == 3,
                    "torch.autocast casts each linear layer's fp32 weight and the layer "
                    "saves the copy (estimator/training_memory.cc)");
      weights.at_optimizer_step = false;
      weights.at_backward_end = false;
    }
    estimate.terms.push_back(Place(std::move(weights), config.offload_params));
  }

  // Gradients.
  double grad_bytes = 4;
  std::string grad_what = "fp32";
  if (mixed && !config.lora.enabled()) {
    switch (config.gradients) {
      case GradientRegime::k16Bit:
        grad_bytes = 2;
        grad_what = "16-bit";
        break;
      case GradientRegime::kFp32:
        grad_what = "fp32 main grads";
        break;
      case GradientRegime::k16BitPlusFp32Copy:
        grad_bytes = 2;
        grad_what = "16-bit";
        break;
    }
  }
  const bool offload = config.offload_optimizer;
  Term gradients = Place(
      StateTerm("gradients", absl::StrCat("gradients (", grad_what, ")"), trainable, grad_bytes,
                zero >= 2,
                absl::StrCat("docs/estimator_reference.md §7 (Megatron, ZeRO paper, HF anatomy)",
                             zero >= 2 ? absl::StrCat("; ", zero_source) : "")),
      offload);
  const bool autocast = config.activation_model == ActivationModel::kTorchAutocast;
  // A torch-autocast step has three candidate peaks (StepPeaks): the start and the end of the
  // backward and the optimizer step; each term says at which it is alive.
  const bool step_moments = autocast && config.include_activations;
  if (step_moments && !config.persistent_gradients &&
      !GradientsAccumulateAcrossMicroBatches(layout)) {
    // zero_grad(set_to_none=True) frees them before the forward; the backward allocates them
    // while it frees more activations than that, so its start holds none.
    gradients.at_backward_start = false;
  }
  estimate.terms.push_back(gradients);
  if (mixed && !config.lora.enabled() && config.gradients == GradientRegime::k16BitPlusFp32Copy) {
    estimate.terms.push_back(
        Place(StateTerm("main_gradients", "main gradients (fp32 copy)", trainable, 4, zero >= 1,
                        "Megatron dist_optimizer.md (fp16 row: 20 B, 4 + 16/d); DeepSpeed "
                        "stage_1_and_2.py (18 = 2 + 4 + 4 + 8)"),
              offload));
  }
  if (mixed && !config.lora.enabled()) {
    estimate.terms.push_back(
        Place(StateTerm("master_weights", "master weights (fp32)", trainable, 4, zero >= 1,
                        absl::StrCat("Micikevicius et al. arXiv:1710.03740",
                                     zero >= 1 ? absl::StrCat("; ", zero_source) : "")),
              offload));
  }

  // Optimizer states.
  const OptimizerStateCost optimizer = OptimizerStates(config.optimizer);
  double optimizer_bytes_per_param = optimizer.bytes_per_param;
  std::string optimizer_note;
  if (optimizer.factored) {
    double factored_total = 0;
    double trainable_total = 0;
    if (config.lora.enabled()) {
      factored_total = static_cast<double>(LoraFactoredSecondMomentPerLayer(spec, config.lora));
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const int64_t per_layer,
                                           LoraParametersPerLayer(spec, config.lora));
      trainable_total = static_cast<double>(per_layer);
    } else if (count.architectural) {
      factored_total = static_cast<double>(count.factored_second_moment);
      trainable_total = static_cast<double>(count.architectural_total);
    } else {
      return absl::InvalidArgumentError(
          "optimizer adafactor needs an architecture (matrix shapes)");
    }
    // 4 bytes per factored value, spread evenly over the trainable parameters.
    optimizer_bytes_per_param = 4.0 * factored_total / trainable_total;
    optimizer_note = absl::StrFormat("; 4 B x %s factored values / %s parameters",
                                     FormatCount(factored_total), FormatCount(trainable_total));
  }
  estimate.terms.push_back(
      Place(StateTerm("optimizer_states",
                      absl::StrCat("optimizer states (", OptimizerName(config.optimizer), ": ",
                                   optimizer.what, ")"),
                      trainable, optimizer_bytes_per_param, zero >= 1,
                      absl::StrCat(optimizer.source, optimizer_note,
                                   zero >= 1 ? absl::StrCat("; ", zero_source) : "")),
            offload));

  if (step_moments && !offload) {
    double updated = 0;  // parameters this rank's optimizer updates
    for (const Group& group : trainable) {
      updated += group.params / (zero >= 1 ? group.shard_degree : 1.0);
    }
    if (std::optional<Term> step = OptimizerStepTerm(spec, config, updated)) {
      step->at_backward_start = false;
      step->at_backward_end = false;
      estimate.terms.push_back(*std::move(step));
    } else {
      estimate.notes.push_back(absl::StrCat(
          "the optimizer step's temporaries of ", OptimizerName(config.optimizer),
          " (not torch.optim's) are not modelled: the optimizer-step peak holds its states only"));
    }
  }

  // A pipeline's first rank computes it for every micro-batch but the first, untied too.
  const bool pipeline_embedding_gradient = step_moments && layout.pp > 1 &&
                                           HoldsEmbedding(layout) &&
                                           GradientsAccumulateAcrossMicroBatches(layout);
  if ((step_moments && spec.tied_embeddings && count.architectural && !config.lora.enabled() &&
       layout.tp == 1) ||
      pipeline_embedding_gradient) {
    // The output layer's gradient reaches the shared weight first; the embedding lookup's dense
    // gradient (embedding_dense_backward, fp32 V x h) is then alive beside it until it is added
    // in place: measured as the last and highest allocation of the backward of tied models.
    Term tied;
    tied.key = "embedding_gradient";
    tied.label = pipeline_embedding_gradient
                     ? "embedding lookup's gradient (a later micro-batch's, end of backward)"
                     : "embedding lookup's gradient (tied weights, end of backward)";
    tied.value = 4.0 * static_cast<double>(count.embedding);
    tied.formula = "4 V h";
    tied.values = absl::StrFormat("4 * %s", FormatCount(static_cast<double>(count.embedding)));
    tied.source =
        "fragscope: PyTorch's embedding backward and AccumulateGrad, seen in the predictor's "
        "allocations (estimator/README.md)";
    tied.at_backward_start = false;
    tied.at_optimizer_step = false;
    estimate.terms.push_back(tied);
  }

  if (zero == 3 && count.architectural) {
    const double largest = static_cast<double>(count.largest_module) * count.given_count_scale() /
                           static_cast<double>(layout.tp);
    const double gathered_bytes = config.lora.enabled() ? weight_bytes : 2 * weight_bytes;
    Term gathered;
    gathered.key = "zero3_gathered";
    gathered.label = "ZeRO-3 gathered parameters (largest module)";
    gathered.value = gathered_bytes * largest;
    gathered.formula = config.lora.enabled() ? "B_w * largest_module / tp"
                                             : "2 B_w * largest_module / tp  (params + grads)";
    gathered.values =
        absl::StrFormat("%s * %s", FormatNumber(gathered_bytes), FormatCount(largest));
    gathered.source =
        "DeepSpeed stage3.py estimate_zero3_model_states_mem_needs (4 x largest layer)";
    gathered.at_optimizer_step = false;  // released after the layer's backward
    gathered.at_backward_end = false;
    estimate.terms.push_back(gathered);
  }

  if (config.include_activations) {
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(std::vector<Term> activations,
                                         !autocast ? ActivationTerms(spec, config)
                                         : LoraActivationsApply(spec, config)
                                             ? LoraActivationTerms(spec, config)
                                             : AutocastActivationTerms(spec, config));
    if (autocast && config.lora.enabled() && !LoraActivationsApply(spec, config)) {
      // The model was measured on full fine-tuning: nothing measured stands behind it here.
      const char* const method = config.lora.qlora ? "QLoRA" : "LoRA";
      for (Term& term : activations) {
        absl::StrAppend(&term.source, "; no measured basis with ", method,
                        ": the full fine-tuning's tensors (see the note)");
      }
      estimate.notes.push_back(absl::StrCat(
          "activation-model torch-autocast has no measured basis with ", method,
          ": it was measured on full fine-tuning with fp32 parameters, and a ", method,
          " step saves other tensors (frozen layers need no inputs for weight gradients, the "
          "adapters save their own",
          config.lora.qlora ? ", and a QLoRA base loaded in 16 bits has a 16-bit residual "
                              "stream and norms, not fp32"
                            : "",
          "); the activation terms are the full fine-tuning's"));
    }
    if (!autocast && layout.stage > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage = ", layout.stage,
                       ": activation-model korthikanti describes pipeline rank 0 "
                       "(use activation-model torch-autocast for another rank)"));
    }
    for (Term& term : activations) {
      // Freed by the backward; a pipeline's merged output is kept until step() returns.
      if (term.key == "activations_pipeline_outputs") {
        estimate.terms.push_back(std::move(term));
        continue;
      }
      term.at_optimizer_step = false;
      term.at_backward_end = false;
      estimate.terms.push_back(std::move(term));
    }
  } else {
    estimate.notes.push_back("activations not included (model states only)");
  }
  if (std::optional<std::string> note = PastPositionsNote(spec, "seq", config.seq_len)) {
    estimate.notes.push_back(*std::move(note));
  }
  for (Term& term : DeviceOverheadTerms(config.overheads))
    estimate.terms.push_back(std::move(term));

  if (step_moments && !config.lora.enabled()) {
    if (std::optional<Term> attention = AttentionBackwardTerm(spec, config)) {
      // The moment holds what the backward start holds but the output layer's and the loss's
      // tensors, plus this term.
      for (Term& term : estimate.terms) {
        term.at_attention_backward = term.at_backward_start && term.key != "activations_output" &&
                                     term.key != "loss_backward";
      }
      estimate.terms.push_back(*std::move(attention));
    }
  }
  if (step_moments) ChoosePeak(config, estimate);

  for (Term& term : ParameterQuantities(spec, count, shard)) {
    estimate.quantities.push_back(std::move(term));
  }
  if (layout.pp > 1 && !autocast) {
    estimate.notes.push_back(
        "pipeline stage 0 is reported (embedding + the most micro-batches in flight); the last "
        "stage holds the output layer and loss instead");
  } else if (layout.pp > 1) {
    estimate.notes.push_back(PipelineRankNote(layout));
  }
  if (config.lora.enabled() && layout.tp > 1) {
    estimate.notes.push_back("LoRA adapters are assumed split by tp like their base matrices");
  }
  return estimate;
}

}  // namespace fragscope::estimator
