// Views of several traces: the ranks of a job (each rank's files under its own directory, the
// cross-rank report, the sweep on the worst rank only) and two traces side by side; the layout
// API per source; the command's forms.
#include "analysis/view/view_set.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/trace_builder.h"
#include "tests/view/view_script_json.h"

namespace fragscope {
namespace {

using testing::FragmentedOomLog;
using testing::Fragscope;
using ::testing::HasSubstr;
using testing::TempPath;

nlohmann::json MetaJson(const std::string& script) { return testing::ScriptJson(script, "meta"); }

// Three ranks: 0 and 2 run out of memory, 1 (a smaller log of the same job) does not; rank 2 is
// given first so that the order given is not the rank order.
std::vector<std::string> RankLogs() {
  std::vector<std::string> logs;
  logs.push_back(FragmentedOomLog({.name = "rank2.fslog", .rank = 2, .world_size = 3}));
  logs.push_back(FragmentedOomLog({.name = "rank0.fslog", .rank = 0, .world_size = 3}));
  testing::TraceBuilder t(64 * kMiB, "", "rank1.fslog", 1, 3);
  t.Alloc(5 * kMiB);
  logs.push_back(t.Finish());
  return logs;
}

TEST(ViewSetTest, RanksHaveTheirOwnFilesTheCrossRankReportAndOneSweep) {
  absl::StatusOr<ViewSet> set = BuildRankViewSet(RankLogs(), {});
  ASSERT_TRUE(set.ok()) << set.status();
  const nlohmann::json meta = MetaJson(set->files.at("data/meta.js"));
  EXPECT_EQ(meta["kind"], "ranks");
  ASSERT_EQ(meta["sources"].size(), 3u);
  ASSERT_EQ(set->sources.size(), 3u);
  size_t swept = 0;
  for (size_t k = 0; k < 3; ++k) {
    const nlohmann::json& entry = meta["sources"][k];
    // In rank order, each under its own directory, its scripts naming it.
    EXPECT_EQ(entry["rank"], static_cast<int>(k));
    EXPECT_EQ(entry["id"], absl::StrCat("s", k));
    EXPECT_EQ(entry["dir"], absl::StrCat("data/s", k, "/"));
    EXPECT_EQ(entry["title"],
              std::filesystem::path(set->sources[k].opener.path()).filename().string());
    EXPECT_THAT(entry["title"].get<std::string>(), HasSubstr(absl::StrCat("rank", k)));
    const nlohmann::json rank = MetaJson(set->files.at(absl::StrCat("data/s", k, "/meta.js")));
    EXPECT_EQ(rank["source"], entry["id"]);
    EXPECT_EQ(rank["events"], entry["events"]);
    const std::string tile = set->files.at(absl::StrCat("data/s", k, "/L0-0.js"));
    EXPECT_TRUE(absl::EndsWith(tile, absl::StrCat(", \"s", k, "\");\n"))) << tile.substr(0, 40);
    if (!rank["report"]["sweep"]["configs"].empty()) ++swept;
    if (k != 1) {
      EXPECT_EQ(rank["report"]["ooms"]["explained"].size(), 1u);
      EXPECT_TRUE(set->files.contains(absl::StrCat("data/s", k, "/layout-0.js")));
    }
  }
  // The cross-rank report, as `analyze` builds it; the sweep on its worst rank only.
  const nlohmann::json& cross = meta["cross_rank"];
  EXPECT_EQ(cross["schema"], "fragscope.cross_rank");
  EXPECT_EQ(cross["ranks"].size(), 3u);
  EXPECT_EQ(cross["world_size"], 3);
  const int worst = cross["worst_rank"].get<int>();
  EXPECT_NE(worst, 1);
  EXPECT_EQ(swept, 1u);
  const nlohmann::json worst_meta =
      MetaJson(set->files.at(absl::StrCat("data/s", worst, "/meta.js")));
  EXPECT_FALSE(worst_meta["report"]["sweep"]["configs"].empty());
  EXPECT_TRUE(set->files.contains("index.html"));
  EXPECT_TRUE(set->files.contains("view_sets.js"));
}

TEST(ViewSetTest, TwoRanksOfOneNumberAreAnError) {
  const std::string a = FragmentedOomLog({.name = "a.fslog", .rank = 1});
  const std::string b = FragmentedOomLog({.name = "b.fslog", .rank = 1});
  absl::StatusOr<ViewSet> set = BuildRankViewSet({a, b}, {});
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr("rank 1"));
}

TEST(ViewSetTest, TwoTracesSideBySideCarryTheirComparison) {
  const std::string a_path = FragmentedOomLog({.name = "a.fslog", .marked = true});
  const std::string b_path = FragmentedOomLog({.name = "b.fslog", .marked = true});
  absl::StatusOr<TraceOpener> a = TraceOpener::Create(a_path);
  absl::StatusOr<TraceOpener> b = TraceOpener::Create(b_path);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<ViewSet> set = BuildDiffViewSet(*a, *b, {});
  ASSERT_TRUE(set.ok()) << set.status();
  const nlohmann::json meta = MetaJson(set->files.at("data/meta.js"));
  EXPECT_EQ(meta["kind"], "diff");
  ASSERT_EQ(meta["sources"].size(), 2u);
  EXPECT_EQ(meta["sources"][0]["dir"], "data/a/");
  EXPECT_EQ(meta["sources"][1]["dir"], "data/b/");
  // The same job twice: every figure and phase the same on both sides, phases aligned.
  const nlohmann::json& c = meta["comparison"];
  EXPECT_EQ(c["a_figures"], c["b_figures"]);
  ASSERT_FALSE(c["phases"].empty());
  for (const nlohmann::json& phase : c["phases"]) {
    ASSERT_FALSE(phase["a"].is_null()) << phase.dump();
    EXPECT_EQ(phase["a"], phase["b"]);
  }
  // No sweep (as `fragscope diff`); each side's own OOM and layouts.
  for (const char* side : {"a", "b"}) {
    const nlohmann::json m = MetaJson(set->files.at(absl::StrCat("data/", side, "/meta.js")));
    EXPECT_TRUE(m["report"]["sweep"]["configs"].empty());
    EXPECT_EQ(m["report"]["ooms"]["explained"].size(), 1u);
  }
}

TEST(ViewSetTest, TheLayoutApiAnswersPerSource) {
  absl::StatusOr<ViewSet> set = BuildRankViewSet(RankLogs(), {});
  ASSERT_TRUE(set.ok()) << set.status();
  const HttpAnswer rank0 = ViewSetLayoutAnswer(*set, {}, "s0", 1000);
  ASSERT_EQ(rank0.status, 200) << rank0.body;
  EXPECT_EQ(nlohmann::json::parse(rank0.body)["segments"], 2);
  const HttpAnswer rank1 = ViewSetLayoutAnswer(*set, {}, "s1", 1000);
  ASSERT_EQ(rank1.status, 200) << rank1.body;
  EXPECT_EQ(nlohmann::json::parse(rank1.body)["segments"], 1);
  const HttpAnswer missing = ViewSetLayoutAnswer(*set, {}, "s7", 0);
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("s7"));
  // One trace: the source "".
  absl::StatusOr<TraceOpener> one = TraceOpener::Create(FragmentedOomLog());
  ASSERT_TRUE(one.ok());
  absl::StatusOr<ViewSet> single = BuildTraceViewSet(*one, {});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(ViewSetLayoutAnswer(*single, {}, "", 5).status, 200);
  EXPECT_EQ(ViewSetLayoutAnswer(*single, {}, "s0", 5).status, 404);
}

TEST(ViewSetTest, TheCommandViewsADirectoryOfRanksAndTwoTracesSideBySide) {
  const std::string ranks = TempPath("ranks");
  std::filesystem::create_directory(ranks);
  for (const std::string& log : RankLogs()) {
    std::filesystem::copy_file(
        log, ranks + "/" + std::filesystem::path(log).filename().string().substr(2));
  }
  const std::string out = TempPath("ranks-view");
  testing::CommandRun run = Fragscope({"view", ranks, "--out", out});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(out + "/data/s2/meta.js"));
  const std::string a = FragmentedOomLog({.name = "a.fslog"});
  const std::string b = FragmentedOomLog({.name = "b.fslog"});
  const std::string diff = TempPath("diff-view");
  run = Fragscope({"view", "--diff", a, b, "--out", diff});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(diff + "/data/b/meta.js"));
  // --diff takes exactly two traces.
  run = Fragscope({"view", "--diff", a, "--out", TempPath("x")});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("two traces"));
  EXPECT_EQ(Fragscope({"view", "--diff", a, b, a, "--out", TempPath("x")}).code, 2);
  // A directory without traces names itself.
  const std::string empty = TempPath("empty");
  std::filesystem::create_directory(empty);
  run = Fragscope({"view", empty, "--out", TempPath("x")});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr(empty));
}

}  // namespace
}  // namespace fragscope
