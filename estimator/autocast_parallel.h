// The torch-autocast activation model (autocast_activations.h) on one rank of a tensor- or
// pipeline-parallel job, as torchtitan runs them with PyTorch's own modules
// (torch.distributed.tensor.parallel, torch.distributed.pipelining); read from fragscope's
// predictor, which runs those modules on fake tensors (estimator/README.md, "Parallel ranks").
//
// Tensor parallelism t = tp with sequence parallelism (torchtitan's plan: the norms
// SequenceParallel, q/k/v and gate/up column-parallel, o and down row-parallel with their outputs
// reduce-scattered along the sequence, lm_head column-parallel under loss_parallel()):
//   per layer  norms / t + casts + (attention + scores + mlp + dropout) / t
//              the residual stream and the norms' tensors are sequence shards; the projections'
//              16-bit input casts are of the all-gathered input (s b h, not divided); q, k, v,
//              the attention output and the MLP's tensors are head / hidden shards
//   output     4 s b V / t + (N / t + E) s b h   (the log-softmax of the vocabulary shard; the
//              final norm's shard; the gathered cast input of lm_head)
//   loss       10 s b V / t  the loss-parallel cross-entropy's forward holds the 16-bit logits
//              shard (2), its fp32 copy (4) and a second fp32 shard of the log-softmax (4) beside
//              the saved one: above its backward's 8 s b V / t, and the step's peak moment
// (Korthikanti et al., arXiv:2205.05198, divide everything by t under sequence parallelism
// because Megatron saves the sharded input and gathers it again in the backward; autocast saves
// the cast of the gathered input instead.)
//
// Pipeline parallelism, rank r of p, m micro-batches of b sequences, L_r = ceil(L / p) layers:
//   in flight  k = m (GPipe), min(p - r, m) (1F1B), and with v = vpp stages per rank
//              (ScheduleInterleaved1F1B) min(w + 1, m v) / v, w = min((v - 1) m_round +
//              2 (p - 1 - r), m v) warm-up forwards of L / (p v) layers, m_round = m /
//              max(1, floor(m / p)) (torch's _get_warmup_ops)
//   layers     k L_r per_layer; the stage module builds an explicit causal mask, so SDPA runs
//              its memory-efficient kernel, which keeps E s b q more per layer, and the mask
//              b s^2 (bool) per micro-batch
//   outputs    4 s b h per stage output the rank keeps for its backward (the fp32 residual
//              stream it sent on): HeldStageOutputs
//   rank 0     the token ids per micro-batch in flight; rank p - 1: the output layer and loss of
//              one micro-batch (m with GPipe), the loss backward, and the schedule's merged
//              output: every micro-batch's 16-bit logits (m E s b V), kept until step() returns
//   gradients  accumulate over the micro-batches: alive at the backward start when m > 1
// The 16-bit weight copies are made once per step (autocast's cast cache spans the schedule).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "estimator/model_spec.h"
#include "estimator/parameter_count.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// m: layout.num_microbatches, or (0) the number of stages p vpp, torchtitan's default.
int64_t PipelineMicroBatches(const ParallelLayout& layout);

// k above: micro-batches whose activations the rank holds at once, in units of its L_r layers
// (1 without pipeline parallelism).
double AutocastMicroBatchesInFlight(const ParallelLayout& layout);

// "min(p - r, m) = min(2 - 0, 4)", for the terms' values.
std::string InFlightValues(const ParallelLayout& layout);

// "pipeline rank 1 of 2 is reported (1f1b schedule, 4 micro-batches); it holds the output layer
// and loss".
std::string PipelineRankNote(const ParallelLayout& layout);

// Stage outputs the rank keeps for the backward: k v on a rank before the last, k v - 1 (its
// earlier virtual stages' micro-batches, one of the last stage's in flight) on the last with
// vpp > 1, none on the last without interleaving (its output is the loss's input).
double HeldStageOutputs(const ParallelLayout& layout);

// Whether the gradients of earlier micro-batches are alive at a backward start: pp > 1, m > 1.
bool GradientsAccumulateAcrossMicroBatches(const ParallelLayout& layout);

// The matrices whose 16-bit copies autocast makes on this rank: every linear layer's (the output
// projection's too, when tied), not transformers 5's experts (fp32 grouped matmuls); with tp or
// pp > 1 (dense models), the rank's layers and, on the last pipeline rank, the output projection,
// split by tp.
double AutocastCastWeights(const ModelSpec& spec, const ParameterCount& count,
                           const ParallelLayout& layout);

// "activations_pipeline_outputs" on the last pipeline rank (empty elsewhere): m E s b V.
std::optional<Term> PipelineOutputsTerm(const ModelSpec& spec, const TrainingConfig& config);

}  // namespace fragscope::estimator
