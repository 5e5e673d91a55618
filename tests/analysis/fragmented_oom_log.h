// The analyzer tests' fragmentation OOMs, written by TraceBuilder.
//
// FragmentedOomLog: on a 64 MiB device eight 5 MiB blocks fill two 20 MiB segments, every other
// block is freed, and a 25 MiB request fails. 20 MiB cached plus 24 MiB on the device are free,
// but no hole or device range fits a 24 MiB segment.
//
// ManyOomsLog: `segments` 10.5 MiB blocks, each alone in a 12 MiB segment, fill the device
// exactly; then `ooms` more requests of the same size fail (each 1.5 MiB hole is too small).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {

struct FragmentedOomLogOptions {
  std::string name = "trace.fslog";  // the log's file name in the temporary directory
  int32_t rank = 0;                  // the header's rank and world size
  int32_t world_size = 0;
  bool marked = false;  // markers "step 0 / layer i" before each block, "step 1 / forward" after
};

// Writes the log and returns its path.
inline std::string FragmentedOomLog(const FragmentedOomLogOptions& options = {}) {
  TraceBuilder t(64 * kMiB, "", options.name, options.rank, options.world_size);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) {
    if (options.marked) t.Mark(absl::StrFormat("step 0 / layer %d", i));
    blocks.push_back(t.Alloc(5 * kMiB));
  }
  for (int i : {0, 2, 4, 6}) t.Free(blocks[static_cast<size_t>(i)]);
  if (options.marked) t.Mark("step 1 / forward");
  t.AllocExpectOom(25 * kMiB);
  return t.Finish();
}

inline constexpr uint64_t kManyOomsRequest = 10 * kMiB + kMiB / 2;

// Writes the log and returns its path.
inline std::string ManyOomsLog(uint64_t segments, uint64_t ooms,
                               const std::string& name = "trace.fslog") {
  TraceBuilder t(segments * 12 * kMiB, "", name);
  for (uint64_t i = 0; i < segments; ++i) t.Alloc(kManyOomsRequest);
  for (uint64_t i = 0; i < ooms; ++i) t.AllocExpectOom(kManyOomsRequest);
  return t.Finish();
}

}  // namespace fragscope::testing
