// The whole-job verdict (analysis/explain/job_verdict.h): the headroom rule at its boundary, the
// footprint rule, a recorded model used without a flag, and --model's strict keys.
#include "analysis/explain/job_verdict.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/explain/model_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(JobVerdictTest, AtCapIsBelowTwoPercentOfWhatTheJobMayUse) {
  const uint64_t available = 1000 * kMiB;
  EXPECT_TRUE(AtCap(-1, available));
  EXPECT_TRUE(AtCap(static_cast<int64_t>(19 * kMiB), available));
  EXPECT_TRUE(AtCap(static_cast<int64_t>(20 * kMiB) - 1, available));
  EXPECT_FALSE(AtCap(static_cast<int64_t>(20 * kMiB), available));
  EXPECT_FALSE(AtCap(static_cast<int64_t>(250 * kMiB), available));
}

// Five 24 MiB segments on a 128 MiB device, each split into two 12 MiB blocks, the first of four
// of them freed: 72 MiB live, 48 MiB cached in 12 MiB holes that live blocks pin (the retry
// ladder cannot release them), 8 MiB left on the device. A request of `request_mib` fits with
// perfect packing but in no hole: a fragmentation OOM whose headroom is 128 - 72 - request.
std::string NearCapLog(uint64_t request_mib, const std::string& name,
                       const std::string& model = "") {
  TraceBuilder t(128 * kMiB, "", name);
  if (!model.empty()) t.RecordModel(model);
  std::vector<DevicePtr> segments;
  for (int i = 0; i < 5; ++i) segments.push_back(t.Alloc(24 * kMiB));
  for (DevicePtr p : segments) t.Free(p);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(t.Alloc(12 * kMiB));
  for (int i : {0, 2, 4, 6}) t.Free(blocks[static_cast<size_t>(i)]);
  t.AllocExpectOom(request_mib * kMiB);
  return t.Finish();
}

TEST(JobVerdictTest, TheHeadroomBoundaryOnSyntheticTraces) {
  // 54 MiB: 2 MiB left (1.6 % of 128 MiB): at the cap, and the trace ends there.
  CommandRun at = Fragscope(
      {"analyze", NearCapLog(54, "at_cap.fslog"), "--no-summary", "--threads", "1", "--json", "-"});
  ASSERT_EQ(at.code, 0) << at.err;
  EXPECT_THAT(at.out, HasSubstr("\"capacity_bound\": true"));
  EXPECT_THAT(at.out, HasSubstr("\"basis\": \"headroom\""));
  EXPECT_THAT(at.out, HasSubstr("\"at_cap\": true"));
  EXPECT_THAT(at.out, HasSubstr("\"headroom_bytes\": 2097152"));
  // 50 MiB: 6 MiB left (4.7 %): not at the cap.
  CommandRun room = Fragscope(
      {"analyze", NearCapLog(50, "room.fslog"), "--no-summary", "--threads", "1", "--json", "-"});
  ASSERT_EQ(room.code, 0) << room.err;
  EXPECT_THAT(room.out, HasSubstr("\"capacity_bound\": false"));
  EXPECT_THAT(room.out, HasSubstr("\"headroom_bytes\": 6291456"));
  EXPECT_THAT(room.out, Not(HasSubstr("\"at_cap\": true")));
  CommandRun text =
      Fragscope({"analyze", NearCapLog(54, "at_cap_text.fslog"), "--no-summary", "--threads", "1"});
  EXPECT_THAT(text.out, HasSubstr("Verdict: capacity-bound (the job is at its cap)"));
  EXPECT_THAT(text.out, HasSubstr("Recommended: none"));
}

TEST(JobVerdictTest, DecideVerdictNeedsTheTraceToEndAtTheOom) {
  OomExplanation x;
  x.in_trace = x.in_replay = true;
  x.cause = OomCause::kFragmentation;
  x.available_bytes = 1000 * kMiB;
  x.allocated_bytes = 990 * kMiB;
  x.rounded_bytes = 5 * kMiB;
  x.headroom_bytes = HeadroomBytes(x);
  x.at_cap = AtCap(x.headroom_bytes, x.available_bytes);
  ASSERT_EQ(x.headroom_bytes, static_cast<int64_t>(5 * kMiB));
  SweepResult baseline;
  baseline.config.is_trace_config = true;
  baseline.ends_at_trace_oom = true;
  JobVerdict ends = DecideVerdict({x}, {baseline}, std::nullopt);
  EXPECT_TRUE(ends.capacity_bound);
  EXPECT_EQ(ends.basis, VerdictBasis::kHeadroom);
  // The trace goes on after the OOM: the sweep's replays of the rest are the test.
  baseline.ends_at_trace_oom = false;
  JobVerdict goes_on = DecideVerdict({x}, {baseline}, std::nullopt);
  EXPECT_FALSE(goes_on.capacity_bound);
  EXPECT_TRUE(goes_on.at_cap);
  // A footprint above the cap decides whatever the headroom.
  FootprintCheck f;
  f.exceeds = true;
  f.theoretical_peak_bytes = 2000.0 * kMiB;
  f.limit_bytes = 1000.0 * kMiB;
  JobVerdict model = DecideVerdict({x}, {baseline}, f);
  EXPECT_TRUE(model.capacity_bound);
  EXPECT_EQ(model.basis, VerdictBasis::kFootprint);
  EXPECT_EQ(model.cause, OomCause::kCapacity);
}

// A GPT-2 small job recorded in the log at a micro-batch whose footprint (~6.9 GiB with torch-
// autocast activations, the Hugging Face default) far exceeds the 128 MiB device.
constexpr char kGpt2Record[] =
    R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 12, )"
    R"("n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024, )"
    R"("resid_pdrop": 0.1}, "job": {"mode": "training", "seq": 512, "micro_batch": 4, )"
    R"("dtype": "bf16", "optimizer": "adamw-fused", "attention": "sdpa"}})";

TEST(JobVerdictTest, ARecordedModelGivesTheFootprintVerdictWithoutAFlag) {
  const std::string log = NearCapLog(50, "recorded.fslog", kGpt2Record);
  CommandRun r = Fragscope({"analyze", log, "--no-summary", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Verdict: capacity-bound (the model's footprint)"));
  EXPECT_THAT(r.out, HasSubstr("from the log's model record"));
  EXPECT_THAT(r.out, HasSubstr("activations torch-autocast (Hugging Face config)"));
  EXPECT_THAT(r.out, HasSubstr("attention on (recorded)"));
  EXPECT_THAT(r.out, HasSubstr("dropout on (Hugging Face config)"));
  EXPECT_THAT(r.out, HasSubstr("not even micro-batch 1 fits"));
  // --model overrides the record.
  CommandRun flag = Fragscope({"analyze", log, "--no-summary", "--threads", "1", "--model",
                               "gpt2-small:seq=512,micro_batch=4"});
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_THAT(flag.out, HasSubstr("from --model gpt2-small"));
  // A damaged record is a warning, and the log is still analyzed.
  CommandRun bad = Fragscope(
      {"analyze", NearCapLog(50, "bad.fslog", R"({"format": 3})"), "--no-summary", "--no-sweep"});
  ASSERT_EQ(bad.code, 0) << bad.err;
  EXPECT_THAT(bad.out, HasSubstr("the log's model record: format: expected"));
  // A record the estimator cannot take (torch-autocast under full recompute is not modelled)
  // costs only the verdict.
  std::string recompute = kGpt2Record;
  recompute.replace(recompute.find("\"attention\""), 0, "\"recompute\": \"full\", ");
  CommandRun refused = Fragscope(
      {"analyze", NearCapLog(50, "refused.fslog", recompute), "--no-summary", "--no-sweep"});
  ASSERT_EQ(refused.code, 0) << refused.err;
  EXPECT_THAT(refused.out, HasSubstr("(no footprint verdict)"));
}

TEST(JobVerdictTest, ModelKeysBelongToTheirMode) {
  absl::StatusOr<ModelJob> batch = ParseModelSpec("gpt2-small:seq=512,batch=4");
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("batch is not a key of training"));
  EXPECT_THAT(batch.status().message(), HasSubstr("the corresponding key is micro_batch"));
  absl::StatusOr<ModelJob> seq = ParseModelSpec("gpt2-small:infer,seq=512");
  ASSERT_FALSE(seq.ok());
  EXPECT_THAT(seq.status().message(), HasSubstr("the corresponding key is context"));
  EXPECT_FALSE(ParseModelSpec("gpt2-small:flash=yes").ok());
  EXPECT_FALSE(ParseModelSpec("gpt2-small:colour=red").ok());
  ASSERT_TRUE(ParseModelSpec("gpt2-small:infer,batch=4,context=2048").ok());
  // Usage errors, before any trace is read; --help lists the keys.
  CommandRun usage = Fragscope({"analyze", "missing.fslog", "--model", "gpt2-small:batch=4"});
  EXPECT_EQ(usage.code, 2);
  EXPECT_THAT(usage.err, HasSubstr("micro_batch"));
  CommandRun help = Fragscope({"analyze", "--help"});
  EXPECT_THAT(help.out, HasSubstr("training: seq, micro_batch, precision"));
  EXPECT_THAT(help.out, HasSubstr("inference: batch, context, prompt, dtype, kv_dtype"));
}

TEST(JobVerdictTest, AHuggingFaceConfigDefaultsToTheMeasuredActivationModel) {
  absl::StatusOr<ModelJob> record = ModelJobFromRecord(kGpt2Record);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_TRUE(record->hugging_face);
  EXPECT_EQ(record->train.activation_model, estimator::ActivationModel::kTorchAutocast);
  EXPECT_TRUE(record->train.flash_attention);
  EXPECT_TRUE(record->train.dropout);  // resid_pdrop 0.1
  EXPECT_EQ(record->train.seq_len, 512);
  EXPECT_EQ(record->train.micro_batch, 4);
  absl::StatusOr<ModelJob> preset = ParseModelSpec("gpt2-small:seq=512");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->train.activation_model, estimator::ActivationModel::kKorthikanti);
  EXPECT_FALSE(ModelJobFromRecord(R"({"format": "fragscope.model/1", "config": {}, )"
                                  R"("job": {"seq": -3}})")
                   .ok());
}

// An inference prediction (one forward under bf16 autocast, fp32 weights, no KV cache) is
// described as that job, not as the estimator's default inference.
TEST(JobVerdictTest, AnInferenceRecordDescribesTheJobThatRan) {
  constexpr char kInference[] =
      R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 2, )"
      R"("n_embd": 128, "n_head": 4, "vocab_size": 1000, "n_positions": 512}, )"
      R"("job": {"mode": "inference", "batch": 2, "context": 512, "dtype": "bf16", )"
      R"("weight_dtype": "fp32", "autocast": "bf16", "use_cache": false}})";
  absl::StatusOr<ModelJob> job = ModelJobFromRecord(kInference);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->training);
  EXPECT_EQ(job->infer.batch, 2);
  EXPECT_EQ(job->infer.context, 512);
  EXPECT_EQ(job->infer.weights, estimator::DType::kFp32);
  EXPECT_EQ(job->infer.autocast, estimator::DType::kBf16);
  EXPECT_FALSE(job->infer.use_kv_cache);
  absl::StatusOr<estimator::MemoryEstimate> e = EstimateModelJob(*job);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->workload, HasSubstr("weights fp32 under bf16 autocast, no KV cache (one forward "
                                     "of batch 2 x 512 tokens)"));
  EXPECT_EQ(e->Find("kv_cache"), nullptr);
  for (const Assumption& a : job->assumptions) {
    if (a.name == "weights" || a.name == "KV cache" || a.name == "batch") {
      EXPECT_EQ(a.basis, AssumptionBasis::kRecorded) << a.name;
    }
  }
  // A KV cache held is a term; bad values name the key.
  absl::StatusOr<ModelJob> cached = ModelJobFromRecord(
      R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 2, )"
      R"("n_embd": 128, "n_head": 4, "vocab_size": 1000}, "job": {"mode": "inference", )"
      R"("batch": 2, "context": 512, "use_cache": true}})");
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_NE(EstimateModelJob(*cached)->Find("kv_cache"), nullptr);
  EXPECT_THAT(
      std::string(ModelJobFromRecord(
                      R"({"format": "fragscope.model/1", "config": )"
                      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4}, "job": )"
                      R"({"mode": "inference", "use_cache": 1}})")
                      .status()
                      .message()),
      HasSubstr("job.use_cache"));
  EXPECT_THAT(
      std::string(ModelJobFromRecord(
                      R"({"format": "fragscope.model/1", "config": )"
                      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4}, "job": )"
                      R"({"mode": "inference", "weight_dtype": "fp13"}})")
                      .status()
                      .message()),
      HasSubstr("job.weight_dtype"));
}

// A generation's record: its prompt is read; the KV cache is in the weights' dtype without
// autocast, in autocast's with it, and in kv_dtype's where the record names one.
TEST(JobVerdictTest, AGenerationRecordsCacheDtype) {
  const auto job = [](const std::string& keys) {
    return ModelJobFromRecord(
        R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 2, )"
        R"("n_embd": 128, "n_head": 4, "vocab_size": 1000}, "job": {"mode": "inference", )"
        R"("batch": 2, "context": 20, "prompt": 16, "new_tokens": 5, "cache": "dynamic", )"
        R"("use_cache": true, )" +
        keys + "}}");
  };
  absl::StatusOr<ModelJob> fp32 = job(R"("weight_dtype": "fp32")");
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ(fp32->infer.prompt_tokens, 16);
  EXPECT_EQ(fp32->infer.context, 20);
  EXPECT_EQ(fp32->infer.kv_cache, estimator::DType::kFp32);
  absl::StatusOr<ModelJob> autocast = job(R"("weight_dtype": "fp32", "autocast": "bf16")");
  ASSERT_TRUE(autocast.ok()) << autocast.status();
  EXPECT_EQ(autocast->infer.kv_cache, estimator::DType::kBf16);
  absl::StatusOr<ModelJob> promoted =
      job(R"("weight_dtype": "fp32", "autocast": "bf16", "kv_dtype": "fp32")");
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_EQ(promoted->infer.kv_cache, estimator::DType::kFp32);
  EXPECT_THAT(std::string(job(R"("prompt": 0)").status().message()), HasSubstr("job.prompt"));
}

// A LoRA or QLoRA prediction's record: the adapters are costed; targets the estimator does not
// cost are an error naming the key (the record is then not used).
TEST(JobVerdictTest, AnAdapterRecordIsCosted) {
  const auto job = [](const std::string& keys) {
    return ModelJobFromRecord(
        R"({"format": "fragscope.model/1", "config": {"model_type": "llama", )"
        R"("hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, )"
        R"("num_attention_heads": 8, "vocab_size": 32000}, "job": {"mode": "training", )"
        R"("seq": 1024, "micro_batch": 2, "dtype": "bf16", "optimizer": "adamw", )" +
        keys + "}}");
  };
  absl::StatusOr<ModelJob> qlora =
      job(R"("lora_rank": 8, "lora_alpha": 16, "lora_targets": "q_proj,v_proj", )"
          R"("lora_dropout": 0.05, "quant": "nf4", "double_quant": true)");
  ASSERT_TRUE(qlora.ok()) << qlora.status();
  EXPECT_EQ(qlora->train.lora.rank, 8);
  EXPECT_EQ(qlora->train.lora.targets, estimator::kLoraQ | estimator::kLoraV);
  EXPECT_TRUE(qlora->train.lora.qlora);
  absl::StatusOr<estimator::MemoryEstimate> e = EstimateModelJob(*qlora);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_NE(e->Find("lora_weights"), nullptr);
  EXPECT_THAT(e->workload, HasSubstr("QLoRA r=8"));
  bool listed = false;
  for (const Assumption& a : qlora->assumptions) {
    if (a.name != "adapters") continue;
    listed = true;
    EXPECT_EQ(a.basis, AssumptionBasis::kRecorded);
    EXPECT_THAT(a.value, HasSubstr("NF4"));
  }
  EXPECT_TRUE(listed);
  absl::StatusOr<ModelJob> all = job(R"("lora_rank": 4, "lora_targets": "all-linear")");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->train.lora.targets, estimator::kLoraAll);
  EXPECT_THAT(std::string(job(R"("lora_rank": 8, "lora_targets": "c_attn")").status().message()),
              HasSubstr("job.lora_targets"));
  EXPECT_THAT(std::string(job(R"("lora_rank": -1)").status().message()),
              HasSubstr("job.lora_rank"));
  EXPECT_THAT(std::string(job(R"("lora_rank": 8, "quant": "int8")").status().message()),
              HasSubstr("job.quant"));
}

// A parallel rank's record carries its layout, sequence parallelism included.
TEST(JobVerdictTest, ARankRecordsLayout) {
  absl::StatusOr<ModelJob> job = ModelJobFromRecord(
      R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 2, )"
      R"("n_embd": 128, "n_head": 4, "vocab_size": 1000}, "job": {"mode": "training", )"
      R"("seq": 64, "micro_batch": 1, "dp": 2, "tp": 2, "sp": true, "zero": 3}})");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->train.layout.dp, 2);
  EXPECT_EQ(job->train.layout.tp, 2);
  EXPECT_TRUE(job->train.layout.sequence_parallel);
  EXPECT_EQ(job->train.zero_stage, 3);
}

// A pipeline rank's record: its schedule, micro-batches and stages (the first is the rank, their
// count the stages per rank), estimated for that rank.
TEST(JobVerdictTest, APipelineRankRecordsItsStages) {
  auto job = [](absl::string_view stages) {
    return ModelJobFromRecord(absl::StrCat(
        R"({"format": "fragscope.model/1", "config": {"model_type": "llama", )"
        R"("num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, )"
        R"("intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": false}, )"
        R"("job": {"mode": "training", "seq": 64, "micro_batch": 1, "pp": 2, )"
        R"("pp_schedule": "interleaved-1f1b", "pp_microbatches": 4, "pp_stages": ")",
        stages, R"("}})"));
  };
  absl::StatusOr<ModelJob> rank = job("1,3");
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(rank->train.layout.pp, 2);
  EXPECT_EQ(rank->train.layout.stage, 1);
  EXPECT_EQ(rank->train.layout.vpp, 2);
  EXPECT_EQ(rank->train.layout.num_microbatches, 4);
  absl::StatusOr<estimator::MemoryEstimate> estimate = EstimateModelJob(*rank);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_NE(estimate->Find("activations_pipeline_outputs"), nullptr);  // the last rank's
  EXPECT_THAT(std::string(job("one").status().message()), HasSubstr("job.pp_stages"));
}

// A record of a model_type the reader does not know is estimated as a Llama-style decoder, and
// the footprint's assumptions say so; a needed field it lacks is named.
TEST(JobVerdictTest, AnUnknownModelTypeIsEstimatedWithItsAssumptionStated) {
  absl::StatusOr<ModelJob> job =
      ModelJobFromRecord(R"({"format": "fragscope.model/1", "config": {"model_type": "acme_lm", )"
                         R"("num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, )"
                         R"("intermediate_size": 512, "vocab_size": 1000}, "job": {"seq": 512}})");
  ASSERT_TRUE(job.ok()) << job.status();
  bool stated = false;
  for (const Assumption& a : job->assumptions) {
    stated = stated || (a.name == "architecture" && absl::StrContains(a.value, "acme_lm") &&
                        absl::StrContains(a.value, "Llama-style"));
  }
  EXPECT_TRUE(stated);
  EXPECT_TRUE(EstimateModelJob(*job).ok());
  EXPECT_THAT(
      std::string(ModelJobFromRecord(R"({"format": "fragscope.model/1", "config": {"model_type": )"
                                     R"("acme_lm", "num_hidden_layers": 2, "hidden_size": 256, )"
                                     R"("num_attention_heads": 4, "vocab_size": 1000}})")
                      .status()
                      .message()),
      HasSubstr("intermediate_size"));
}

TEST(JobVerdictTest, TheDemoSetsItsJobAgainstItsModel) {
  CommandRun demo = Fragscope({"demo", "--no-html", "--threads", "1"});
  ASSERT_EQ(demo.code, 0) << demo.err;
  EXPECT_THAT(demo.out, HasSubstr("from the log's model record"));
  EXPECT_THAT(demo.out, HasSubstr("theoretical peak 15.40 GiB fits"));
  EXPECT_THAT(demo.out, HasSubstr("term              estimated      live here"));
  EXPECT_THAT(demo.out, HasSubstr("The fix: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
}

}  // namespace
}  // namespace fragscope::testing
