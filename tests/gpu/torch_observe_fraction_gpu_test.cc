// Mode 2 under torch.cuda.set_per_process_memory_fraction: the observed log records the cap
// (Note [The memory fraction in observed logs] in hooks/torch_observer.cc), so that `fragscope
// verify` and `analyze` replay the job's fragmentation OOM with no flag, where before they needed
// --memory-fraction. A separate executable: observing cannot be undone within a process.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "fslog/fslog_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/torch_observer.h"

namespace fragscope::torch_hooks {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

// scripts/gpu/frag_oom_job.py's pattern: chunks of a growing workspace, each freed, after which a
// result of 0.55 of it is kept. Under the default settings every segment ends up pinned by one
// result and the job runs out of memory at chunk 10 with gigabytes reserved but unallocated.
// Returns whether it ran out of memory.
bool RunFragmentingJob(int64_t allowed_bytes) {
  const int64_t base = allowed_bytes / 16;
  const int64_t growth = allowed_bytes / 128;
  std::vector<torch::Tensor> kept;
  for (int i = 0; i < 12; ++i) {
    const int64_t work = (base + i * growth) / kMiB * kMiB;
    const int64_t keep = static_cast<int64_t>(static_cast<double>(work) * 0.55) / kMiB * kMiB;
    ObserveMark(absl::StrCat("chunk ", i));
    try {
      torch::Tensor workspace =
          torch::empty({work}, torch::dtype(torch::kUInt8).device(torch::kCUDA));
      workspace.reset();
      kept.push_back(torch::empty({keep}, torch::dtype(torch::kUInt8).device(torch::kCUDA)));
    } catch (const c10::OutOfMemoryError&) {
      return true;
    }
  }
  return false;
}

TEST(TorchObserveFractionGpuTest, TheCapIsInTheLogAndTheReplayReproducesTheOom) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string pattern =
      absl::StrCat(::testing::TempDir(), "/fragscope_observe_fraction.%p.%d.fslog");
  ASSERT_TRUE(ObserveNativeAllocator(pattern).ok());
  const int64_t total = static_cast<int64_t>(at::cuda::getDeviceProperties(0)->totalGlobalMem);
  const int64_t allowed = int64_t{4} << 30;
  // Set after observing: the log shows it as an options change at the first device call.
  c10::cuda::CUDACachingAllocator::setMemoryFraction(
      static_cast<double>(allowed) / static_cast<double>(total), 0);
  ASSERT_TRUE(RunFragmentingJob(allowed)) << "the job was expected to run out of memory";
  ASSERT_TRUE(ObserveFlush().ok());

  const std::string path =
      absl::StrCat(::testing::TempDir(), "/fragscope_observe_fraction.", getpid(), ".0.fslog");
  absl::StatusOr<FslogReader> reader = FslogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string options_change;
  LogEntry entry;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    if (entry.kind() == EventKind::kOptionsChange && options_change.empty()) {
      options_change = entry.text;
    }
  }
  EXPECT_THAT(options_change, HasSubstr("per_process_memory_fraction:"));

  std::ostringstream out, err;
  EXPECT_EQ(cli::RunCommandLine({"verify", path}, out, err), 0) << out.str() << err.str();
  EXPECT_THAT(out.str(), HasSubstr("faithful"));
  EXPECT_THAT(out.str(), HasSubstr("1 OOM match the trace"));
  std::ostringstream analyze_out, analyze_err;
  EXPECT_EQ(cli::RunCommandLine({"analyze", path, "--no-summary", "--threads", "2"}, analyze_out,
                                analyze_err),
            0)
      << analyze_err.str();
  EXPECT_THAT(analyze_out.str(), HasSubstr("cause: fragmentation"));
  EXPECT_THAT(analyze_out.str(), HasSubstr("Recommended (*): PYTORCH_CUDA_ALLOC_CONF="));
}

}  // namespace
}  // namespace fragscope::torch_hooks
