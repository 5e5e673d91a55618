// The two definitions of a trace's peaks when the job was refused a request that the replay
// served (a cap the trace does not record): the report's peaks and utilization are the job's,
// without it, and say so; the sweep's rows and memory_summary are the replay's, with it, and say
// so. On the H100 fragmentation log without its cap: 2.71 GiB allocated and 58.8 % against the
// [trace] row's 3088 MiB and 65.5 %, the difference being the 316 MiB request.
#include <string>

#include "absl/strings/str_cat.h"
#include "estimator/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/testing/unwrapped.h"

namespace fragscope {
namespace {

using ::fragscope::testing::Unwrapped;

using ::fragscope::testing::Fragscope;
using ::testing::HasSubstr;
using ::testing::Not;

std::string H100Log() {
  return absl::StrCat(FRAGSCOPE_TEST_DATA_DIR, "/gpu/h100_fragmentation_oom.fslog");
}

TEST(RefusedRequestsTest, TextNamesWhichFiguresCountTheRefusedRequest) {
  const auto r = Fragscope({"analyze", H100Log()});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = Unwrapped(r.out);
  EXPECT_THAT(text, HasSubstr("Memory (peaks over the trace, without the 1 request (316.00 MiB) "
                              "the job was refused and the replay served) allocated 2.71 GiB"));
  EXPECT_THAT(text, HasSubstr("GMLake utilization = peak active / peak reserved 58.8 %"));
  EXPECT_THAT(text, HasSubstr("(default) [trace]                     no      4.61 GiB  65.5 %"));
  EXPECT_THAT(text, HasSubstr("Each row is a replay under its settings and counts the 1 request "
                              "(316.00 MiB) the job was refused and the replay served, which the "
                              "peaks and utilization above leave out"));
  EXPECT_THAT(text, HasSubstr("memory_summary() of the replay at the end of the trace (the "
                              "replay's statistics: they count the 1 request (316.00 MiB)"));
  EXPECT_THAT(text, HasSubstr("| Allocated memory      |      0 B   |   3088 MiB |"));
  // Under the job's cap nothing is served that the job was refused: one set of figures.
  const auto capped = Fragscope({"analyze", H100Log(), "--memory-fraction", "0.05051862997816944",
                                 "--capacity", "85017493504"});
  ASSERT_EQ(capped.code, 0) << capped.err;
  EXPECT_THAT(capped.out, HasSubstr("Memory (peaks over the trace)\n"));
  EXPECT_THAT(capped.out, Not(HasSubstr("the job was refused and the replay served")));
}

TEST(RefusedRequestsTest, JsonCarriesTheRequestsSoBothDefinitionsReconcile) {
  const auto r = Fragscope({"analyze", H100Log(), "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(r.out);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json& rank = (*json)["ranks"][0];
  const nlohmann::json& peaks = rank["peaks"];
  EXPECT_EQ(peaks["refused_requests_left_out"].get<double>(), 1);
  EXPECT_EQ(peaks["refused_bytes_left_out"].get<double>(), 316.0 * 1024 * 1024);
  // The job's peak plus the refused request is the [trace] row's peak, and memory_summary's.
  const nlohmann::json& row = rank["sweep"]["configs"][0];
  ASSERT_TRUE(row["is_trace_config"].get<bool>());
  const double job = peaks["allocated_bytes"].get<double>();
  const double refused = peaks["refused_bytes_left_out"].get<double>();
  EXPECT_EQ(row["peak_allocated_bytes"].get<double>(), job + refused);
  EXPECT_EQ(rank["final_stats"]["allocated_bytes.all.peak"].get<double>(), job + refused);
  EXPECT_NEAR(rank["fragmentation"]["utilization"].get<double>(), 0.588, 0.0005);
  EXPECT_NEAR(row["utilization"].get<double>(), 0.655, 0.0005);
}

}  // namespace
}  // namespace fragscope
