// Synthetic rank logs for the cross-rank tests: a fresh directory of rank{r}.fslog files written
// by WriteSyntheticRankLog (analysis/ranks/synthetic_rank_job.h), with the given ranks changed.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/ranks/synthetic_rank_job.h"
#include "gtest/gtest.h"

namespace fragscope::testing {

// A new empty directory under the test temp directory.
inline std::string FreshDir(const std::string& name) {
  static int counter = 0;
  const std::string dir =
      absl::StrFormat("%s/fragscope_%s_%d_%d", ::testing::TempDir(), name, getpid(), counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `ranks` logs of about `events` events into a fresh directory; `adjust` may change each
// rank's spec. Returns the directory.
inline std::string WriteRankLogs(const std::string& name, int ranks, uint64_t events,
                                 const std::function<void(SyntheticRankSpec&)>& adjust = {}) {
  const std::string dir = FreshDir(name);
  for (int r = 0; r < ranks; ++r) {
    SyntheticRankSpec spec;
    spec.rank = r;
    spec.world_size = ranks;
    spec.local_rank = r % 4;
    spec.host = absl::StrFormat("node-%d", r / 4);
    spec.events = events;
    if (adjust) adjust(spec);
    const absl::StatusOr<uint64_t> written =
        WriteSyntheticRankLog(absl::StrFormat("%s/rank%d.fslog", dir, r), spec);
    EXPECT_TRUE(written.ok()) << written.status();
  }
  return dir;
}

}  // namespace fragscope::testing
