// Reproduction of the EleutherAI cookbook's calc/calc_transformer_mem.py as paraphrased in
// docs/estimator_reference.md §4.1 (training path). Outputs bytes; the script prints GiB.
//
//   params      2 V h (untied) + h s (learned positions, sized by the sequence length)
//               + 8 h L + 2 h + 2 (1 + kv_ratio) L h^2 + n_mlp_linears L h ff_factor h
//   model       P * B / (tp * pp), further / N under ZeRO-3          (B = low-precision bytes)
//   gradients   P * bytes_per_grad, / N for ZeRO >= 2
//   optimizer   P * {12 adamw, 8 sgd-momentum}, / N for ZeRO >= 1
//   comm        (5e8 * 2 for ZeRO >= 1) + (1e9 * 2 for ZeRO-3), only when N > 1
//   activations s b h L [(16B + 2) + (2B + 1) a s / h]; checkpointing drops the a s/h term;
//               / tp with partition_activations
//   misc        misc_mem_gib GiB
// Known defects (found by running the script, kept here): the KV cache term lacks the K/V factor 2;
// "checkpoint" is selective recompute, not Korthikanti's 2sbh full recompute.
#pragma once

#include <cstdint>

namespace fragscope::estimator::reference {

struct EleutherArgs {
  int64_t vocab_size = 51200;
  int64_t hidden_size = 6144;
  int64_t num_layers = 44;
  int64_t num_attention_heads = 64;
  int64_t sequence_length = 2048;
  int64_t batch_size_per_gpu = 8;
  double ffn_expansion_factor = 4;
  int64_t num_mlp_linears = 2;
  double kv_size_ratio = 1.0;
  int zero_stage = 1;
  int64_t num_gpus = 1;
  int64_t tensor_parallel_size = 1;
  int64_t pipeline_parallel_size = 1;
  int64_t low_prec_bytes = 2;
  int64_t bytes_per_grad = 4;
  int64_t optimizer_bytes = 12;  // 12 adamw, 8 sgd with momentum
  bool checkpoint_activations = false;
  bool partition_activations = false;
  double misc_mem_gib = 0;
};

struct EleutherResult {
  double params = 0;
  double model_bytes = 0;
  double gradient_bytes = 0;
  double optimizer_bytes = 0;
  double communication_bytes = 0;
  double activation_bytes = 0;
  double misc_bytes = 0;
  double total_bytes = 0;
};

EleutherResult EleutherTrainingMemory(const EleutherArgs& args);

}  // namespace fragscope::estimator::reference
