// Reports: the JSON schema is pinned by a golden file (tests/analysis/data/report_golden.json;
// regenerate with FRAGSCOPE_UPDATE_GOLDEN=1 after a deliberate schema change, and bump
// kReportSchemaVersion if a field changed meaning or disappeared); the terminal report fits 100
// columns; the HTML report is self-contained.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_split.h"
#include "analysis/analyzer.h"
#include "analysis/report/html_report.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "gtest/gtest.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

using ::fragscope::testing::FragmentedOomLog;

// The fragmentation OOM with markers (fragmented_oom_log.h), with a sweep and --at; replayed
// on `capacity_bytes` instead of the trace's 64 MiB when given.
AnalysisReport ScenarioReport(std::optional<uint64_t> capacity_bytes = std::nullopt) {
  const std::string path = FragmentedOomLog({.marked = true});
  AnalysisOptions options;
  options.threads = 2;
  options.at_index = 10;
  options.timeline_points = 8;
  options.capacity_bytes = capacity_bytes;
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({path}, options);
  EXPECT_OK(report.status());
  report->ranks[0].info.path = "fragmented.fslog";  // the temporary path varies
  return *report;
}

TEST(ReportTest, JsonMatchesTheGoldenFile) {
  std::ostringstream json;
  WriteJsonReport(ScenarioReport(), {.include_timings = false}, json);
  const std::string golden_path =
      std::string(FRAGSCOPE_ANALYSIS_TEST_DIR) + "/data/report_golden.json";
  if (std::getenv("FRAGSCOPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden_path, std::ios::trunc) << json.str();
  }
  std::ifstream in(golden_path);
  ASSERT_TRUE(in) << "missing " << golden_path << " (FRAGSCOPE_UPDATE_GOLDEN=1 writes it)";
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(json.str(), golden.str())
      << "the JSON report changed; if deliberate, update REPORT_SCHEMA.md and regenerate the "
         "golden file with FRAGSCOPE_UPDATE_GOLDEN=1";
}

TEST(ReportTest, JsonStartsWithSchemaAndVersion) {
  std::ostringstream json;
  WriteJsonReport(ScenarioReport(), {}, json);
  EXPECT_EQ(
      json.str().rfind("{\n  \"schema\": \"fragscope.analysis\",\n  \"schema_version\": 2,", 0), 0u)
      << json.str().substr(0, 200);
}

// sweep --json: the sweep's own document, without the analysis sections it never computed.
TEST(ReportTest, SweepJsonIsADocumentOfItsOwn) {
  std::ostringstream json;
  WriteJsonSweepReport(ScenarioReport().ranks[0], {}, json);
  const std::string text = json.str();
  EXPECT_EQ(text.rfind("{\n  \"schema\": \"fragscope.sweep\",\n  \"schema_version\": 1,", 0), 0u)
      << text.substr(0, 200);
  for (const char* key : {"\"trace\":", "\"device\":", "\"sweep\":", "\"configs\":"}) {
    EXPECT_NE(text.find(key), std::string::npos) << key;
  }
  for (const char* key : {"\"peaks\":", "\"replay\":", "\"layout_at_end\":", "\"timeline\":"}) {
    EXPECT_EQ(text.find(key), std::string::npos) << key;
  }
}

TEST(ReportTest, TerminalReportFitsOneHundredColumns) {
  std::ostringstream text;
  RenderTextReport(ScenarioReport(), {}, text);
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  EXPECT_NE(text.str().find("cause: fragmentation"), std::string::npos);
  EXPECT_NE(text.str().find("Recommended"), std::string::npos);
  EXPECT_NE(text.str().find("Layout after event 10"), std::string::npos);
}

TEST(ReportTest, WrappingBreaksAtSpacesAndKeepsLongWordsWhole) {
  const std::string url(120, 'u');
  std::ostringstream out;
  WriteWrapped(out, std::string(60, 'a') + " " + std::string(30, 'b') + " for  " + url + " end",
               "  ");
  EXPECT_EQ(out.str(), "  " + std::string(60, 'a') + " " + std::string(30, 'b') + " for\n  " + url +
                           "\n  end\n");
}

TEST(ReportTest, CountsAgreeWithTheirNouns) {
  EXPECT_EQ(CountOf(0, "OOM"), "0 OOMs");
  EXPECT_EQ(CountOf(1, "OOM"), "1 OOM");
  EXPECT_EQ(CountOf(2, "OOM"), "2 OOMs");
  EXPECT_EQ(CountOf(1, "live block"), "1 live block");
  std::ostringstream text;
  RenderTextReport(ScenarioReport(), {}, text);
  EXPECT_EQ(text.str().find(" 1 OOMs"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find(" 1 holes"), std::string::npos) << text.str();
  std::ostringstream html;
  WriteHtmlReport(ScenarioReport(), html);
  EXPECT_EQ(html.str().find(">1</div><div class=\"k\">OOMs<"), std::string::npos);
  EXPECT_EQ(html.str().find(" 1 holes"), std::string::npos);
}

// The summary card calls the sweep's pick "recommended" only when it avoids an OOM the replay
// reproduces (RecommendationHeadlineSaysWhetherAReproducedOomIsAvoided in sweep_test.cc has every
// case); on a device where the job's OOM does not happen the pick is just the lowest peak.
TEST(ReportTest, HtmlCardSaysWhatTheSweepsPickIs) {
  std::ostringstream html;
  WriteHtmlReport(ScenarioReport(), html);  // no tested setting avoids this OOM: no card
  EXPECT_EQ(html.str().find("setting</div>"), std::string::npos) << html.str();
  std::ostringstream roomy;
  WriteHtmlReport(ScenarioReport(1 * kGiB), roomy);
  EXPECT_EQ(roomy.str().find("<div class=\"k\">recommended setting"), std::string::npos);
  EXPECT_NE(roomy.str().find("<div class=\"v\">(default)</div><div class=\"k\">lowest-peak "
                             "setting (the job's OOM is not reproduced)</div>"),
            std::string::npos)
      << roomy.str();
}

TEST(ReportTest, HtmlIsSelfContained) {
  std::ostringstream html;
  WriteHtmlReport(ScenarioReport(), html);
  const std::string s = html.str();
  EXPECT_EQ(s.rfind("<!doctype html>", 0), 0u);
  EXPECT_EQ(s.find("src="), std::string::npos) << "no external resources";
  EXPECT_EQ(s.find("href="), std::string::npos) << "no links to load";
  EXPECT_EQ(s.find("<script src"), std::string::npos);
  EXPECT_NE(s.find("Memory timeline"), std::string::npos);
  EXPECT_NE(s.find("Segment map at the OOM"), std::string::npos);
  EXPECT_NE(s.find("pins this segment"), std::string::npos);
  EXPECT_NE(s.find("Sweep: the same requests"), std::string::npos);
  EXPECT_NE(s.find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace fragscope
