// `analyze --predict` (cli/predict_beside.h): the prediction's arguments from a model
// record, and what is refused, naming the record's key. The prediction itself runs in
// tests/predict (analyze_predict_test.py: it needs torch).
#include "cli/predict_beside.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragscope::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kConfig[] = R"("config": {"model_type": "gpt2", "n_layer": 2})";

absl::StatusOr<std::vector<std::string>> Args(const std::string& job,
                                              const std::string& conf = "") {
  return PredictArguments(
      std::string("{\"format\": \"fragscope.model/1\", ") + kConfig + ", \"job\": " + job + "}",
      ::testing::TempDir() + "/config.json", "out.fslog", "h100-80gb", conf, 2);
}

TEST(PredictBesideTest, TheRecordedJobBecomesThePredictorsFlags) {
  absl::StatusOr<std::vector<std::string>> args =
      Args(R"({"mode": "training", "seq": 1024, "micro_batch": 4, "dtype": "bf16",
               "optimizer": "adamw-fused", "attention": "flash", "recompute": "full"})",
           "max_split_size_mb:128");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args,
              ElementsAre("--config", ::testing::TempDir() + "/config.json", "--out", "out.fslog",
                          "--gpu", "h100-80gb", "--steps", "2", "--conf", "max_split_size_mb:128",
                          "--seq", "1024", "--micro-batch", "4", "--dtype", "bf16", "--optimizer",
                          "adamw-fused", "--attention", "sdpa", "--recompute"));
  absl::StatusOr<std::vector<std::string>> infer =
      Args(R"({"mode": "inference", "batch": 8, "context": 512})");
  ASSERT_TRUE(infer.ok()) << infer.status();
  EXPECT_THAT(*infer, ::testing::IsSupersetOf({"--mode", "inference", "--seq", "512"}));
  // A generation is predicted by generate again: prompt, new tokens and cache.
  absl::StatusOr<std::vector<std::string>> generate = Args(
      R"({"mode": "inference", "batch": 2, "context": 20, "prompt": 16, "new_tokens": 5,
          "cache": "static"})");
  ASSERT_TRUE(generate.ok()) << generate.status();
  EXPECT_THAT(*generate,
              ::testing::IsSupersetOf({"--generate", "5", "--cache", "static", "--seq", "16"}));
  EXPECT_THAT(*generate, ::testing::Not(::testing::Contains("20")));
}

// A parallel rank's record: the same rank of the same layout.
TEST(PredictBesideTest, AParallelRankIsPredictedAsThatRank) {
  const auto args = [](const std::string& layout, int32_t rank) {
    return PredictArguments(std::string("{\"format\": \"fragscope.model/1\", ") + kConfig +
                                R"(, "job": {"seq": 8, "micro_batch": 1, )" + layout + "}}",
                            ::testing::TempDir() + "/config.json", "o.fslog", "h100-80gb", "", 1,
                            rank);
  };
  absl::StatusOr<std::vector<std::string>> fsdp_tp =
      args(R"("dp": 2, "tp": 4, "sp": true, "zero": 3)", 5);
  ASSERT_TRUE(fsdp_tp.ok()) << fsdp_tp.status();
  EXPECT_THAT(*fsdp_tp, ::testing::IsSupersetOf({"--parallel", "fsdp2", "--tp", "4", "--world-size",
                                                 "8", "--rank", "5"}));
  absl::StatusOr<std::vector<std::string>> ddp = args(R"("dp": 4, "tp": 1, "zero": 0)", 3);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  EXPECT_THAT(*ddp, ::testing::IsSupersetOf({"--parallel", "ddp", "--world-size", "4"}));
  EXPECT_THAT(*ddp, ::testing::Not(::testing::Contains("--tp")));
  absl::StatusOr<std::vector<std::string>> one = args(R"("dp": 1, "tp": 1)", 0);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, ::testing::Not(::testing::Contains("--world-size")));
  EXPECT_THAT(std::string(args(R"("dp": 2, "tp": 2, "zero": 3)", 4).status().message()),
              HasSubstr("rank 4 is outside"));
  EXPECT_THAT(std::string(args(R"("dp": 2, "zero": 1)", 0).status().message()),
              HasSubstr("job.zero"));
  EXPECT_THAT(std::string(args(R"("tp": "x")", 0).status().message()), HasSubstr("job.tp"));
  // A pipeline stage's rank, with experts split over its data-parallel ranks: pp x dp ranks.
  absl::StatusOr<std::vector<std::string>> pp_ep = args(
      R"("dp": 4, "zero": 3, "pp": 2, "pp_schedule": "interleaved-1f1b", "pp_microbatches": 4,
         "pp_stages": "1,3", "ep": 2)",
      7);
  ASSERT_TRUE(pp_ep.ok()) << pp_ep.status();
  EXPECT_THAT(*pp_ep, ::testing::IsSupersetOf({"--parallel", "fsdp2", "--pp", "2", "--pp-schedule",
                                               "interleaved-1f1b", "--pp-microbatches", "4", "--ep",
                                               "2", "--world-size", "8", "--rank", "7"}));
  absl::StatusOr<std::vector<std::string>> cp = args(R"("dp": 2, "zero": 3, "cp": 4)", 6);
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_THAT(*cp, ::testing::IsSupersetOf({"--cp", "4", "--world-size", "8", "--rank", "6"}));
  EXPECT_THAT(
      std::string(
          args(R"("dp": 1, "zero": 3, "pp": 2, "pp_schedule": "zb")", 0).status().message()),
      HasSubstr("job.pp_schedule \"zb\""));
  EXPECT_THAT(std::string(args(R"("dp": 1, "pp": 2, "pp_microbatches": 0)", 0).status().message()),
              HasSubstr("job.pp_microbatches"));
}

TEST(PredictBesideTest, WhatCannotBePredictedNamesTheKey) {
  EXPECT_THAT(std::string(Args(R"({"mode": "training", "micro_batch": 4})").status().message()),
              HasSubstr("job.seq"));
  EXPECT_THAT(std::string(Args(R"({"mode": "inference", "context": 4})").status().message()),
              HasSubstr("job.batch"));
  EXPECT_THAT(
      std::string(Args(R"({"seq": 8, "micro_batch": 1, "optimizer": "lion"})").status().message()),
      HasSubstr("job.optimizer \"lion\""));
  EXPECT_THAT(
      std::string(Args(R"({"mode": "serving", "seq": 8, "micro_batch": 1})").status().message()),
      HasSubstr("job.mode"));
  EXPECT_THAT(
      std::string(Args(R"({"mode": "inference", "batch": 2, "new_tokens": 5})").status().message()),
      HasSubstr("job.prompt"));
  EXPECT_THAT(std::string(Args(R"({"mode": "inference", "batch": 2, "prompt": 4,
                                   "new_tokens": "-1"})")
                              .status()
                              .message()),
              HasSubstr("job.new_tokens \"-1\""));
  EXPECT_THAT(std::string(Args(R"({"mode": "inference", "batch": 2, "prompt": 4,
                                   "new_tokens": 3, "cache": "paged"})")
                              .status()
                              .message()),
              HasSubstr("job.cache \"paged\""));
  EXPECT_FALSE(PredictArguments("{\"job\": {}}", "c.json", "o", "h100-80gb", "", 1).ok());
  EXPECT_FALSE(PredictArguments("not json", "c.json", "o", "h100-80gb", "", 1).ok());
}

}  // namespace
}  // namespace fragscope::cli
