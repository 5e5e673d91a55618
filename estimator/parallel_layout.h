// ParallelLayout: how a job splits one model over GPUs, and which parameters land on the
// most-loaded GPU.
//
// N = tp * pp * dp GPUs. Expert parallelism (ep) splits the experts inside the data-parallel
// group, so the expert data-parallel size is dp / ep (Megatron's EDP). The estimator reports the
// most-loaded rank, which is pipeline stage 0 (it owns the embedding and, under 1F1B, holds pp
// micro-batches of activations), following Megatron's theoretical_memory_usage.py.
//
// Sharding of the parameters on stage 0 (docs/estimator_reference.md §1.1; L_s = ceil(L / pp)):
//   split by tp    L_s * (Q,K,V,O + their column-parallel biases) + dense MLP matrices and
//                  column biases of its dense layers + shared experts of its MoE layers
//                  + V h (vocab-parallel embedding) + V h if untied and pp == 1 (output layer)
//   replicated     L_s * (norms, q/k norms, O bias) + MLP row biases + routers and shared-expert
//                  gates + learned positions + embedding norm + final norm if pp == 1 (it lives
//                  on the last stage)
//   experts        L_moe,s * (all experts of a layer) / (tp * ep)   (expert tensor parallel = tp)
// A model with dense and MoE layers has its dense layers first (DeepSeek-V3's
// first_k_dense_replace), so stage 0 takes them first (FirstLayers in parameter_count.h).
// Megatron's own count omits biases and puts the final norm on stage 0; reference/megatron.h
// reproduces that exactly, this file models where the tensors really are.
// A bare parameter count (no architecture) is split as P / (tp * pp) (EleutherAI's 3D rule).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/model_spec.h"
#include "estimator/parameter_count.h"

namespace fragscope::estimator {

// The order torch.distributed.pipelining runs a step's micro-batches in (the autocast activation
// model's in-flight count, autocast_parallel.h): GPipe (all forwards, then all backwards) or 1F1B
// (ScheduleInterleaved1F1B when vpp > 1). Korthikanti's model assumes Megatron's 1F1B.
enum class PipelineSchedule : uint8_t { k1F1B, kGpipe };

struct ParallelLayout {
  int64_t tp = 1;                  // tensor-parallel size t
  int64_t pp = 1;                  // pipeline-parallel size p
  int64_t dp = 1;                  // data-parallel size d
  int64_t ep = 1;                  // expert-parallel size, a divisor of dp
  int64_t vpp = 1;                 // virtual stages per rank v (interleaved 1F1B); 1 = off
  bool sequence_parallel = false;  // Megatron sequence parallelism (needs tp > 1 to matter)
  int64_t num_microbatches = 0;    // micro-batches per step m; 0 = at least pp
  // The pipeline rank described, in [0, pp): rank 0 holds the embedding (and with vpp > 1
  // stages 0, pp, ...), rank pp - 1 the final norm and the output layer. Korthikanti's model
  // describes rank 0 only.
  int64_t stage = 0;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;

  int64_t gpus() const { return tp * pp * dp; }
};

// Which checks apply: training requires tp | num_kv_heads; inference engines replicate KV heads
// when tp > num_kv_heads, so there tp may also be a multiple of num_kv_heads.
enum class LayoutUse : uint8_t { kTraining, kInference };

// Errors name the field and value, e.g. "tp = 3 does not divide num_heads = 40".
absl::Status ValidateParallelLayout(const ParallelLayout& layout, const ModelSpec& spec,
                                    LayoutUse use);

// Layers on the most-loaded stage: ceil(L / pp).
int64_t LayersOnFirstStage(const ModelSpec& spec, const ParallelLayout& layout);

// Whether layout.stage holds the embedding (rank 0) / the final norm and output layer
// (rank pp - 1; both with pp == 1).
inline bool HoldsEmbedding(const ParallelLayout& layout) { return layout.stage == 0; }
inline bool HoldsOutputLayer(const ParallelLayout& layout) { return layout.stage == layout.pp - 1; }

absl::string_view PipelineScheduleName(PipelineSchedule schedule);
// "1f1b", "gpipe", or "interleaved-1f1b" (1F1B; the caller sets vpp); errors name `field`.
absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(absl::string_view text,
                                                       absl::string_view field);

struct ParameterShard {
  double tensor_parallel = 0;  // parameters split by tp (already divided)
  double replicated = 0;       // parameters every tp rank holds in full
  double expert = 0;           // routed-expert parameters on this rank
  std::string formula;         // symbolic, for --explain
  std::string values;          // substituted

  double dense() const { return tensor_parallel + replicated; }
  double total() const { return dense() + expert; }
};

// The parameters on pipeline rank layout.stage, tensor rank 0 (its ceil(L / pp) layers: the
// first ones on rank 0; the others' evenly split ranges, with vpp > 1 its vpp virtual stages). A
// given count (spec.parameter_count with an architecture) scales every part by
// count.given_count_scale().
//   REQUIRES: ValidateParallelLayout(layout, spec, ...) is OK.
ParameterShard ShardParameters(const ModelSpec& spec, const ParameterCount& count,
                               const ParallelLayout& layout);

// An estimate's parameter quantities: the model's counts (ParameterCountTerms), then the
// parameters on this GPU.
std::vector<Term> ParameterQuantities(const ModelSpec& spec, const ParameterCount& count,
                                      const ParameterShard& shard);

}  // namespace fragscope::estimator
