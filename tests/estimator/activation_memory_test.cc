// Activations: Korthikanti et al. Table 2 on GPT-3 (reference 8.2), the Ultra-Scale Playbook's
// plot values, and the pipeline factors.
#include "gtest/gtest.h"
#include "tests/estimator/example_models.h"

#include "estimator/activation_memory.h"
#include "estimator/model_presets.h"
#include "estimator/units.h"

namespace fragscope::estimator {
namespace {

using ::fragscope::testing::BareModel;

double PerLayerMiB(int64_t tp, bool sp, Recompute recompute, bool flash = false,
                   bool dropout = true) {
  TrainingConfig config;
  config.seq_len = 2048;
  config.micro_batch = 1;
  config.layout.tp = tp;
  config.layout.sequence_parallel = sp;
  config.recompute = recompute;
  config.flash_attention = flash;
  config.dropout = dropout;
  return ActivationsPerLayer(*FindModelPreset("gpt-3-175b"), config).stored() / kMiB;
}

TEST(ActivationMemoryTest, ReproducesKorthikantiTable2OnGpt3) {
  // s 2048, b 1, h 12288, a 96, t 8: sbh = 24 MiB and 5as/h = 80.
  EXPECT_DOUBLE_EQ(PerLayerMiB(1, false, Recompute::kNone), 2736);      // sbh (34 + 5as/h)
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, false, Recompute::kNone), 552);       // sbh (10 + 24/t + 5as/ht)
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, true, Recompute::kNone), 342);        // sbh (34/t + 5as/ht)
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, false, Recompute::kSelective), 312);  // sbh (10 + 24/t)
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, true, Recompute::kSelective), 102);   // sbh 34/t
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, false, Recompute::kFull), 48);        // 2 sbh
}

TEST(ActivationMemoryTest, FlashAttentionDropsTheQuadraticTerm) {
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, false, Recompute::kNone, /*flash=*/true), 312);
  EXPECT_DOUBLE_EQ(PerLayerMiB(8, true, Recompute::kNone, /*flash=*/true), 102);
}

TEST(ActivationMemoryTest, WithoutDropoutMasksAndDropoutOutputsDisappear) {
  // sbh (32 + 4as/h) at t = 1: 24 MiB * (32 + 64).
  EXPECT_DOUBLE_EQ(PerLayerMiB(1, false, Recompute::kNone, false, /*dropout=*/false), 2304);
}

TEST(ActivationMemoryTest, Fp32ActivationsUseEleutherCoefficients) {
  // (16B + 2) + (2B + 1) as/h with B = 4 and as/h = 96 * 2048 / 12288 = 16: 66 + 9 * 16 = 210.
  TrainingConfig config;
  config.precision = Precision::kFp32;
  config.seq_len = 2048;
  EXPECT_DOUBLE_EQ(ActivationsPerLayer(*FindModelPreset("gpt-3-175b"), config).stored() / kMiB,
                   24.0 * 210);
}

ModelSpec PlaybookModel() {
  // h 4096, L 32, a 32, MHA, f = 4h: the Ultra-Scale Playbook's activation plot.
  ModelSpec spec;
  spec.name = "playbook-8b";
  spec.num_layers = 32;
  spec.hidden_size = 4096;
  spec.num_heads = 32;
  spec.vocab_size = 32000;
  spec.position_embedding = PositionKind::kRotary;
  return spec;
}

TEST(ActivationMemoryTest, ReproducesUltraScalePlaybookPlot) {
  TrainingConfig config;
  config.seq_len = 1024;
  EXPECT_NEAR(ActivationsPerLayer(PlaybookModel(), config).stored() * 32 / kGiB, 9.25, 0.005);
  config.seq_len = 4096;
  EXPECT_NEAR(ActivationsPerLayer(PlaybookModel(), config).stored() * 32 / kGiB, 97.0, 0.005);
}

TEST(ActivationMemoryTest, MicroBatchesInFlight) {
  ParallelLayout layout;
  EXPECT_EQ(MicroBatchesInFlight(layout), 1);
  layout.pp = 4;
  EXPECT_EQ(MicroBatchesInFlight(layout), 4);  // 1F1B: stage 0 holds p micro-batches
  layout.num_microbatches = 2;
  EXPECT_EQ(MicroBatchesInFlight(layout), 2);  // fewer micro-batches than stages
  layout.pp = 8;
  layout.vpp = 2;
  EXPECT_DOUBLE_EQ(MicroBatchesInFlight(layout), 8 * 1.4375);  // 1 + (p-1)/(p v)
}

TEST(ActivationMemoryTest, Gpt3StageZeroAgreesWithMegatronSpSelective) {
  // Megatron prints 9,816.0 MiB (t 8, p 8, SP + selective, s 2048, b 1). fragscope keeps the
  // 8-byte token ids unsplit by tp, which adds 0.11 MiB.
  TrainingConfig config;
  config.seq_len = 2048;
  config.layout.tp = 8;
  config.layout.pp = 8;
  config.layout.sequence_parallel = true;
  config.recompute = Recompute::kSelective;
  absl::StatusOr<std::vector<Term>> terms = ActivationTerms(*FindModelPreset("gpt-3-175b"), config);
  ASSERT_TRUE(terms.ok()) << terms.status();
  double total = 0;
  for (const Term& term : *terms) {
    if (term.key != "recompute_working_set") total += term.value;
  }
  EXPECT_NEAR(total / kMiB, 9816.0, 0.2);
  // No output layer term on stage 0 of a pipeline.
  for (const Term& term : *terms) EXPECT_NE(term.key, "activations_output");
}

TEST(ActivationMemoryTest, FullRecomputeReportsOneLayerWorkingSet) {
  TrainingConfig config;
  config.seq_len = 2048;
  config.recompute = Recompute::kFull;
  absl::StatusOr<std::vector<Term>> terms = ActivationTerms(*FindModelPreset("gpt-3-175b"), config);
  ASSERT_TRUE(terms.ok());
  const Term* working = nullptr;
  for (const Term& term : *terms) {
    if (term.key == "recompute_working_set") working = &term;
  }
  ASSERT_NE(working, nullptr);
  EXPECT_DOUBLE_EQ(working->value / kMiB, 2736);
  EXPECT_DOUBLE_EQ((*terms)[0].value / kMiB, 48.0 * 96);
}

TEST(ActivationMemoryTest, BareCountHasNoActivations) {
  const ModelSpec spec = BareModel(1000);
  absl::StatusOr<std::vector<Term>> terms = ActivationTerms(spec, TrainingConfig());
  ASSERT_FALSE(terms.ok());
  EXPECT_NE(std::string(terms.status().message()).find("num_layers"), std::string::npos);
}

}  // namespace
}  // namespace fragscope::estimator
