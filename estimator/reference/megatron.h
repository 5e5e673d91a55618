// Reproduction of Megatron-LM's theoretical memory model
// (megatron/training/theoretical_memory_usage.py, docs/estimator_reference.md §1), kept separate
// from fragscope's own model so that Megatron's printed numbers can be reproduced exactly and
// compared. Dense, non-MLA, non-MoE path only.
//
// Differences from fragscope's model (estimator/training_memory.h), on purpose: Megatron omits
// linear biases, puts the final norm on stage 0, models only the bf16 + fp32-grad optimizer row
// (18 or 6 + 12/d bytes/param), uses 18 + 4f/h per layer on the SP + selective path (no gated
// MLP term) and 10 + 24/t on every other path (even for recompute none or full), times 1.05.
#pragma once

#include <cstdint>

namespace fragscope::estimator::reference {

struct MegatronArgs {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;  // 0 -> num_attention_heads
  int64_t kv_channels = 0;       // 0 -> hidden_size / num_attention_heads
  int64_t ffn_hidden_size = 0;
  int64_t padded_vocab_size = 0;  // see MegatronPaddedVocab
  bool swiglu = false;
  bool untie_embeddings = false;
  bool rms_norm = false;  // n_norm = 1 (RMSNorm) or 2 (LayerNorm)
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  int64_t vpp = 0;  // virtual pipeline stages per rank; 0 or 1 = not interleaved
  int64_t num_microbatches = 1;
  bool sequence_parallel = false;
  bool selective_recompute = false;
  bool distributed_optimizer = false;
  int64_t seq_length = 0;
  int64_t micro_batch_size = 1;
};

// Vocabulary padded to a multiple of divisible_by * tp (Megatron's make_vocab_size_divisible_by,
// default 128): GPT-3's 50257 at tp = 8 -> 51200.
int64_t MegatronPaddedVocab(int64_t vocab_size, int64_t tp, int64_t divisible_by = 128);

// num_bytes_per_parameter: 18 without, 6 + 12/d with the distributed optimizer.
double MegatronBytesPerParameter(bool distributed_optimizer, int64_t dp);

// The table in docs/user-guide/features/dist_optimizer.md, all three rows:
// fp16 params + fp16 grads 20 | 4 + 16/d; bf16 + fp32 grads 18 | 6 + 12/d; fp32 16 | 8 + 8/d.
enum class MegatronDTypeRow : uint8_t { kFp16Fp16, kBf16Fp32, kFp32Fp32 };
double MegatronTableBytesPerParameter(MegatronDTypeRow row, bool distributed_optimizer, int64_t dp);

// Parameters on the most-loaded shard (pipeline stage 0).
double MegatronParametersOnStage0(const MegatronArgs& args);

// compute_weight_and_optimizer_memory, in bytes.
double MegatronWeightAndOptimizerBytes(const MegatronArgs& args);

// compute_activation_memory (SP + selective) when sequence_parallel && selective_recompute,
// else compute_activation_memory_without_sp, in bytes.
double MegatronActivationBytes(const MegatronArgs& args);

}  // namespace fragscope::estimator::reference
