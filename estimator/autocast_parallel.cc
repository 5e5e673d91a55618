#include "estimator/autocast_parallel.h"

#include <algorithm>

#include "absl/strings/str_format.h"

#include "estimator/parallel_layout.h"

namespace fragscope::estimator {

int64_t PipelineMicroBatches(const ParallelLayout& layout) {
  return layout.num_microbatches > 0 ? layout.num_microbatches : layout.pp * layout.vpp;
}

double AutocastMicroBatchesInFlight(const ParallelLayout& layout) {
  if (layout.pp == 1) return 1.0;
  const int64_t m = PipelineMicroBatches(layout);
  const int64_t p = layout.pp;
  const int64_t r = layout.stage;
  if (layout.schedule == PipelineSchedule::kGpipe) return static_cast<double>(m);
  if (layout.vpp == 1) return static_cast<double>(std::min(p - r, m));
  // ScheduleInterleaved1F1B: the warm-up forwards, then one more before the first backward.
  const int64_t v = layout.vpp;
  const int64_t rounds = std::max<int64_t>(1, m / p);
  const int64_t per_round = m / rounds;
  const int64_t warmup = std::min((v - 1) * per_round + 2 * (p - 1 - r), m * v);
  return static_cast<double>(std::min(warmup + 1, m * v)) / static_cast<double>(v);
}

std::string InFlightValues(const ParallelLayout& layout) {
  const int64_t m = PipelineMicroBatches(layout);
  if (layout.pp == 1) return "1";
  if (layout.schedule == PipelineSchedule::kGpipe) return absl::StrFormat("m = %d", m);
  if (layout.vpp == 1) {
    return absl::StrFormat("min(p - r, m) = min(%d - %d, %d)", layout.pp, layout.stage, m);
  }
  return absl::StrFormat("min(w + 1, m v) / v = %g (p %d, r %d, m %d, v %d)",
                         AutocastMicroBatchesInFlight(layout), layout.pp, layout.stage, m,
                         layout.vpp);
}

double HeldStageOutputs(const ParallelLayout& layout) {
  if (layout.pp == 1) return 0.0;
  const double chunks = AutocastMicroBatchesInFlight(layout) * static_cast<double>(layout.vpp);
  if (!HoldsOutputLayer(layout)) return chunks;
  return layout.vpp > 1 ? chunks - 1.0 : 0.0;
}

std::string PipelineRankNote(const ParallelLayout& layout) {
  return absl::StrFormat(
      "pipeline rank %d of %d is reported (%s schedule%s, %d micro-batches)%s", layout.stage,
      layout.pp, PipelineScheduleName(layout.schedule),
      layout.vpp > 1 ? absl::StrFormat(", interleaved: %d stages per rank", layout.vpp) : "",
      PipelineMicroBatches(layout),
      HoldsOutputLayer(layout) ? "; it holds the output layer and loss"
      : HoldsEmbedding(layout) ? "; it holds the embedding"
                               : "");
}

bool GradientsAccumulateAcrossMicroBatches(const ParallelLayout& layout) {
  return layout.pp > 1 && PipelineMicroBatches(layout) > 1;
}

double AutocastCastWeights(const ModelSpec& spec, const ParameterCount& count,
                           const ParallelLayout& layout) {
  const double experts =
      static_cast<double>(count.moe_layers) * static_cast<double>(count.active_expert_parameters);
  const double cast = static_cast<double>(count.matmul_weights_active) - experts;
  if (layout.tp == 1 && layout.pp == 1) return cast;
  const double per_layer = static_cast<double>(count.attention_weights + count.mlp_weights);
  const double output = cast - static_cast<double>(spec.num_layers) * per_layer;
  return (static_cast<double>(LayersOnFirstStage(spec, layout)) * per_layer +
          (HoldsOutputLayer(layout) ? output : 0.0)) /
         static_cast<double>(layout.tp);
}

std::optional<Term> PipelineOutputsTerm(const ModelSpec& spec, const TrainingConfig& config) {
  const ParallelLayout& layout = config.layout;
  if (layout.pp == 1 || !HoldsOutputLayer(layout)) return std::nullopt;
  const double m = static_cast<double>(PipelineMicroBatches(layout));
  const double s = static_cast<double>(config.seq_len);
  const double b = static_cast<double>(config.micro_batch);
  const double v = static_cast<double>(spec.vocab_size);
  const double e = WeightBytes(config.precision);
  Term term;
  term.key = "activations_pipeline_outputs";
  term.label = "pipeline schedule's merged output (every micro-batch's 16-bit logits)";
  term.value = m * e * s * b * v;
  term.formula = "m E s b V";
  term.values = absl::StrFormat("%g * %g * %g * %g * %g", m, e, s, b, v);
  term.source =
      "torch.distributed.pipelining: the last stage keeps each micro-batch's output to merge them "
      "as step()'s result; seen in fragscope's predictor (estimator/autocast_parallel.h)";
  return term;
}

}  // namespace fragscope::estimator
