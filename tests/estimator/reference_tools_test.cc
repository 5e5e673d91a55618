// The public tools reproduced exactly (docs/estimator_reference.md §8.2): Megatron (MiB),
// DeepSpeed (GiB printed as "GB"), the EleutherAI cookbook (GiB), accelerate (GiB as "GB").
#include <vector>

#include "gtest/gtest.h"

#include "estimator/reference/accelerate.h"
#include "estimator/reference/deepspeed.h"
#include "estimator/reference/eleuther.h"
#include "estimator/reference/megatron.h"
#include "estimator/units.h"

namespace fragscope::estimator::reference {
namespace {

MegatronArgs Llama2_7b() {
  MegatronArgs args;
  args.num_layers = 32;
  args.hidden_size = 4096;
  args.num_attention_heads = 32;
  args.ffn_hidden_size = 11008;
  args.padded_vocab_size = MegatronPaddedVocab(32000, 1);
  args.swiglu = true;
  args.untie_embeddings = true;
  args.rms_norm = true;
  args.dp = 8;
  args.seq_length = 4096;
  return args;
}

MegatronArgs Gpt3() {
  MegatronArgs args;
  args.num_layers = 96;
  args.hidden_size = 12288;
  args.num_attention_heads = 96;
  args.ffn_hidden_size = 4 * 12288;
  args.padded_vocab_size = MegatronPaddedVocab(50257, 8);
  args.tp = 8;
  args.pp = 8;
  args.dp = 16;
  args.num_microbatches = 8;
  args.seq_length = 2048;
  return args;
}

TEST(MegatronReferenceTest, Llama2WeightsOptimizerAndActivations) {
  MegatronArgs args = Llama2_7b();
  EXPECT_EQ(args.padded_vocab_size, 32000);
  EXPECT_EQ(MegatronParametersOnStage0(args), 6738415616.0);
  EXPECT_NEAR(MegatronWeightAndOptimizerBytes(args) / kMiB, 115672.6, 0.05);
  args.distributed_optimizer = true;
  EXPECT_NEAR(MegatronWeightAndOptimizerBytes(args) / kMiB, 48196.9, 0.05);
  // Non-SP path, s 4096, b 1: sbh (10 + 24/t) L + embedding + output terms, x 1.05.
  EXPECT_NEAR(MegatronActivationBytes(args) / kMiB, 18591.3, 0.05);
}

TEST(MegatronReferenceTest, Gpt3Stage0) {
  MegatronArgs args = Gpt3();
  EXPECT_EQ(args.padded_vocab_size, 51200);
  EXPECT_EQ(MegatronParametersOnStage0(args), 2797145088.0);
  args.distributed_optimizer = true;
  EXPECT_NEAR(MegatronWeightAndOptimizerBytes(args) / kMiB, 18006.1, 0.05);
  args.distributed_optimizer = false;
  EXPECT_NEAR(MegatronWeightAndOptimizerBytes(args) / kMiB, 48016.2, 0.05);
  args.sequence_parallel = true;
  args.selective_recompute = true;
  EXPECT_NEAR(MegatronActivationBytes(args) / kMiB, 9816.0, 0.05);
  args.vpp = 2;
  EXPECT_NEAR(MegatronActivationBytes(args) / kMiB, 14110.5, 0.05);
}

TEST(MegatronReferenceTest, DistributedOptimizerTable) {
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kFp16Fp16, false, 8), 20);
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kFp16Fp16, true, 8), 6);
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kBf16Fp32, false, 8), 18);
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kBf16Fp32, true, 8), 7.5);
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kFp32Fp32, false, 8), 16);
  EXPECT_EQ(MegatronTableBytesPerParameter(MegatronDTypeRow::kFp32Fp32, true, 8), 9);
}

void ExpectGiB(double bytes, double gib) { EXPECT_NEAR(bytes / kGiB, gib, 0.005); }

TEST(DeepSpeedReferenceTest, T5_3bFromMemoryRst) {
  const std::vector<DeepSpeedRow> zero2 = DeepSpeedZero2Estimates(2851e6, 8, 1);
  ExpectGiB(zero2[0].cpu_bytes, 127.45);
  ExpectGiB(zero2[0].gpu_bytes, 5.31);
  ExpectGiB(zero2[1].gpu_bytes, 11.28);  // the docs still say 15.93 (old 4 + 16/N)
  ExpectGiB(4 * 2851e6 + 16 * 2851e6 / 8, 15.93);
  const std::vector<DeepSpeedRow> zero3 = DeepSpeedZero3Estimates(2851e6, 32e6, 8, 1);
  const double cpu[] = {71.69, 127.45, 63.72, 127.45, 1.43, 127.45};
  const double gpu[] = {0.12, 0.12, 0.78, 0.78, 6.09, 6.09};
  ASSERT_EQ(zero3.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    ExpectGiB(zero3[i].cpu_bytes, cpu[i]);
    ExpectGiB(zero3[i].gpu_bytes, gpu[i]);
  }
}

TEST(DeepSpeedReferenceTest, Llama2_7b) {
  const double p = 6738415616;
  const std::vector<DeepSpeedRow> zero2 = DeepSpeedZero2Estimates(p, 8, 1);
  ExpectGiB(zero2[0].cpu_bytes, 301.23);
  ExpectGiB(zero2[0].gpu_bytes, 12.55);
  ExpectGiB(zero2[1].cpu_bytes, 301.23);
  ExpectGiB(zero2[1].gpu_bytes, 26.67);
  const std::vector<DeepSpeedRow> zero3 = DeepSpeedZero3Estimates(p, 131072000, 8, 1);
  const double cpu[] = {169.44, 301.23, 150.62, 301.23, 5.86, 301.23};
  const double gpu[] = {0.49, 0.49, 2.06, 2.06, 14.61, 14.61};
  for (size_t i = 0; i < 6; ++i) {
    ExpectGiB(zero3[i].cpu_bytes, cpu[i]);
    ExpectGiB(zero3[i].gpu_bytes, gpu[i]);
  }
  // axolotl #1129 prints 169.45 / 0.49 for "a 6738M model" on 1 node x 4 GPUs: the same row
  // (it does not depend on the GPU count) up to the last printed digit.
  const DeepSpeedRow axolotl = DeepSpeedZero3Estimates(p, 131072000, 4, 1)[0];
  EXPECT_NEAR(axolotl.cpu_bytes / kGiB, 169.45, 0.015);
  ExpectGiB(axolotl.gpu_bytes, 0.49);
}

TEST(EleutherReferenceTest, CookbookLlama7bExample) {
  EleutherArgs args;
  args.vocab_size = 51200;
  args.hidden_size = 4096;
  args.num_layers = 32;
  args.num_attention_heads = 32;
  args.sequence_length = 4096;
  args.batch_size_per_gpu = 1;
  args.ffn_expansion_factor = 3.5;
  args.num_mlp_linears = 2;
  args.zero_stage = 1;
  args.num_gpus = 1;
  const EleutherResult r = EleutherTrainingMemory(args);
  EXPECT_EQ(r.params, 6342844416.0);
  ExpectGiB(r.activation_bytes, 97.00);
  ExpectGiB(r.model_bytes, 11.81);
  ExpectGiB(r.gradient_bytes, 23.63);
  ExpectGiB(r.optimizer_bytes, 70.89);
  EXPECT_NEAR(r.total_bytes / kGiB, 203.33, 0.01);
}

TEST(AccelerateReferenceTest, Llama2HeadlessAndBloom) {
  const std::vector<AccelerateRow> llama =
      AccelerateEstimate(6607343616, AccelerateAdamRule::kCurrent);
  ExpectGiB(llama[0].model_bytes, 24.61);
  ExpectGiB(llama[1].model_bytes, 12.31);
  ExpectGiB(llama[2].model_bytes, 6.15);
  ExpectGiB(llama[3].model_bytes, 3.08);
  ExpectGiB(llama[0].adam_bytes, 98.46);
  ExpectGiB(llama[1].adam_bytes, 49.23);
  EXPECT_EQ(llama[2].adam_bytes, -1);
  EXPECT_EQ(llama[3].adam_bytes, -1);
  // The HF Space's BLOOM post: fp16 328.29 "GB", fp32 656.57, Adam 1.28 "TB" (old 4x rule).
  const std::vector<AccelerateRow> bloom =
      AccelerateEstimate(176247271424, AccelerateAdamRule::kBefore8644e23b);
  ExpectGiB(bloom[1].model_bytes, 328.29);
  ExpectGiB(bloom[0].model_bytes, 656.57);
  EXPECT_NEAR(bloom[1].adam_bytes / kTiB, 1.28, 0.005);
}

}  // namespace
}  // namespace fragscope::estimator::reference
