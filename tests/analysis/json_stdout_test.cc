// `--json -` (cli/json_output.h): analyze, sweep and demo write their JSON document to
// stdout, and nothing else there, so that a pipe reads valid JSON; `--json PATH` still writes the
// file after the text.
#include <filesystem>
#include <string>

#include "estimator/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

// The schema of the JSON document that is all of `out`, or "" (with a failure) if it is not one.
std::string SchemaOf(const std::string& out) {
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(out);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << out;
  if (!json.ok() || !json->contains("schema") || !(*json)["schema"].is_string()) return "";
  return (*json)["schema"].get<std::string>();
}

TEST(JsonStdoutTest, DashWritesTheDocumentAloneToStdout) {
  const std::string log = FragmentedOomLog({.name = "stdout.fslog"});
  auto r = Fragscope({"analyze", log, "--max-split-size-mb", "0", "--json", "-"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(SchemaOf(r.out), "fragscope.analysis");
  r = Fragscope({"sweep", log, "--max-split-size-mb", "0", "--json=-"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(SchemaOf(r.out), "fragscope.sweep");
  r = Fragscope({"demo", "--steps", "1", "--no-html", "--threads", "2", "--json", "-"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(SchemaOf(r.out), "fragscope.analysis");
  EXPECT_FALSE(std::filesystem::exists("-"));
}

TEST(JsonStdoutTest, APathStillGetsTheFileAndStdoutTheText) {
  const std::string path = TempPath("analyze.json");
  const auto r = Fragscope(
      {"analyze", FragmentedOomLog({.name = "stdout.fslog"}), "--no-sweep", "--json", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Out of memory: 1 OOM"));
  EXPECT_THAT(r.out, HasSubstr("JSON report: " + path));
  EXPECT_TRUE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace fragscope::testing
