// `fragscope summarize`, `fragscope merge` and `fragscope analyze` over many ranks: the commands,
// the summary JSON (schema, round trip, errors naming the file and the key) and the reports.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "analysis/ranks/rank_summary_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/rank_logs_test_util.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string OutlierLogs() {
  static const std::string dir = WriteRankLogs("cmd_ranks", 6, 8'000, [](SyntheticRankSpec& s) {
    if (s.rank == 4) s.extra_optimizer_bytes = 4 * kGiB;
  });
  return dir;
}

TEST(RankCommandsTest, SummarizeEverywhereThenMergeNamesTheOutlier) {
  const std::string sums = FreshDir("sums");
  CommandRun run = Fragscope({"summarize", OutlierLogs(), "--out-dir", sums, "--threads", "2"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("rank 4 (log header): "));
  EXPECT_THAT(run.out, HasSubstr("rank4.fslog.summary.json"));
  const std::string json = FreshDir("merged") + "/report.json";
  const std::string html = FreshDir("merged_html") + "/report.html";
  run = Fragscope({"merge", sums, "--json", json, "--html", html});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("fragscope analysis of 6 ranks (world size 6)"));
  EXPECT_THAT(run.out, HasSubstr("rank 4 reserves"));
  EXPECT_THAT(run.out, HasSubstr("in the optimizer phase"));
  EXPECT_THAT(run.out, HasSubstr("Worst rank (>): no rank ran out of memory; rank 4 reserved"));
  EXPECT_THAT(run.out, HasSubstr("run `fragscope analyze"));
  const nlohmann::json report = nlohmann::json::parse(FileText(json));
  EXPECT_EQ(report["schema"], "fragscope.cross_rank");
  EXPECT_EQ(report["schema_version"], 1);
  EXPECT_EQ(report["rank_count"], 6);
  EXPECT_EQ(report["worst_rank"], 4);
  ASSERT_FALSE(report["outliers"].empty());
  EXPECT_EQ(report["outliers"][0]["rank"], 4);
  EXPECT_EQ(report["outliers"][0]["metric"], "peak_reserved");
  EXPECT_EQ(report["outliers"][0]["phase"], "optimizer");
  EXPECT_EQ(report["ranks"].size(), 6u);
  EXPECT_TRUE(report["worst_report"].is_null());
  const std::string page = FileText(html);
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("rank 4 reserves"));
}

TEST(RankCommandsTest, AnalyzeADirectoryExplainsTheWorstRankInFull) {
  const std::string out_dir = FreshDir("analyze_out");
  CommandRun run = Fragscope({"analyze", OutlierLogs(), "--no-sweep", "--no-summary", "--json",
                              out_dir + "/r.json", "--html", out_dir + "/r.html"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("fragscope analysis of 6 ranks"));
  EXPECT_THAT(run.out, HasSubstr("fragscope analysis of " + OutlierLogs() + "/rank4.fslog"));
  const nlohmann::json report = nlohmann::json::parse(FileText(out_dir + "/r.json"));
  EXPECT_EQ(report["worst_report"]["schema"], "fragscope.analysis");
  EXPECT_EQ(report["worst_report"]["ranks"][0]["trace"]["rank"], 4);
  EXPECT_THAT(FileText(out_dir + "/r.html"), HasSubstr("<iframe"));
  // A quoted pattern is expanded by fragscope itself.
  run = Fragscope({"analyze", OutlierLogs() + "/rank*.fslog", "--no-sweep", "--no-summary"});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("of 6 ranks"));
}

TEST(RankCommandsTest, SummaryJsonRoundTrips) {
  const std::string out = FreshDir("one") + "/s.json";
  CommandRun run = Fragscope({"summarize", OutlierLogs() + "/rank4.fslog", "--json", out});
  ASSERT_EQ(run.code, 0) << run.err;
  absl::StatusOr<RankSummary> read = ReadRankSummaryFile(out);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 4);
  EXPECT_EQ(read->world_size, 6);
  EXPECT_EQ(read->host, "node-1");
  EXPECT_EQ(read->local_rank, 0);
  ASSERT_TRUE(read->outside_pytorch_bytes.has_value());
  EXPECT_EQ(*read->outside_pytorch_bytes, 512 * kMiB);
  ASSERT_GE(read->phases.size(), 3u);
  EXPECT_EQ(RankSummaryDocument(*read), FileText(out)) << "written again, byte for byte";
}

TEST(RankCommandsTest, SummaryErrorsNameTheFileAndTheKey) {
  const std::string dir = FreshDir("bad_sums");
  const std::string good = dir + "/good.json";
  ASSERT_EQ(Fragscope({"summarize", OutlierLogs() + "/rank0.fslog", "--json", good}).code, 0);
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(FileText(good));
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  nlohmann::ordered_json bad_type = doc;
  bad_type["phases"][1]["reserved_rise_bytes"] = "lots";
  nlohmann::ordered_json missing = doc;
  missing.erase("peak_reserved_bytes");
  nlohmann::ordered_json newer = doc;
  newer["schema_version"] = 99;
  nlohmann::ordered_json other = doc;
  other["schema"] = "fragscope.analysis";
  const struct {
    std::string path;
    std::string message;
  } cases[] = {
      {write("type.json", bad_type.dump()),
       "type.json: key 'phases[1].reserved_rise_bytes': expected an unsigned integer, got string"},
      {write("missing.json", missing.dump()), "missing.json: key 'peak_reserved_bytes': missing"},
      {write("newer.json", newer.dump()), "newer.json: key 'schema_version': 99"},
      {write("other.json", other.dump()), "other.json: key 'schema': \"fragscope.analysis\""},
      {write("text.json", "{\"schema\": oops}"), "text.json: not JSON (byte"},
      {dir + "/absent.json", "absent.json: cannot open the file"},
  };
  for (const auto& c : cases) {
    CommandRun run = Fragscope({"merge", good, c.path});
    EXPECT_EQ(run.code, 1) << c.path;
    EXPECT_THAT(run.err, HasSubstr(c.message)) << run.err;
  }
  // Two summaries of one rank.
  CommandRun run = Fragscope({"merge", good, good});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("both claim rank 0"));
}

TEST(RankCommandsTest, UsageErrors) {
  const std::string log = OutlierLogs() + "/rank0.fslog";
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"summarize"}, "no trace given"},
      {{"summarize", OutlierLogs(), "--json", "x.json"}, "--json and --rank are for one trace"},
      {{"summarize", log, "--rank", "-1"}, "--rank"},
      {{"summarize", log, "--json", "a.json", "--out-dir", "."}, "not both"},
      {{"summarize", log, "--out-dir", "/nonexistent/dir"}, "is not a directory"},
      {{"summarize", log, "--json", log}, "--json"},
      {{"merge"}, "no summary given"},
      {{"merge", "x.json", "--threads", "0"}, "--threads expects 1 to"},
      {{"merge", "x.json", "--bogus"}, "--bogus"},
  };
  for (const auto& c : cases) {
    CommandRun run = Fragscope(c.args);
    EXPECT_EQ(run.code, 2) << c.args[0] << " " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message));
  }
  EXPECT_EQ(Fragscope({"summarize", "--help"}).code, 0);
  EXPECT_THAT(Fragscope({"merge", "--help"}).out, HasSubstr("usage: fragscope merge"));
  EXPECT_THAT(Fragscope({"help"}).out, HasSubstr("summarize"));
}

TEST(RankCommandsTest, SnapshotGetsItsRankFromTheFlag) {
  const std::string dir = FreshDir("flag_rank");
  const std::string pickle = dir + "/snapshot.pickle";
  ASSERT_EQ(Fragscope({"convert", OutlierLogs() + "/rank1.fslog", pickle}).code, 0);
  const std::string out = dir + "/s.json";
  CommandRun run = Fragscope({"summarize", pickle, "--rank", "17", "--json", out});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("rank 17 (--rank)"));
  EXPECT_THAT(FileText(out), Not(HasSubstr("\"outside_pytorch_bytes\": 0")));
}

}  // namespace
}  // namespace fragscope::testing
