// Mode 1 through LibTorch: a small training loop on fragscope's allocator
// (UseFragscopeAllocator), its stats and log, and an OOM raised as c10::OutOfMemoryError.
// One process = one allocator swap: this executable holds only tests that share it.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/torch_allocator.h"

namespace fragscope::torch_hooks {
namespace {

std::string LogPattern() {
  return absl::StrCat(::testing::TempDir(), "/fragscope_replace_gpu.%p.%d.fslog");
}

class TorchReplaceGpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!torch::cuda::is_available()) return;
    installed_ = UseFragscopeAllocator({.conf = "max_split_size_mb:256", .log = LogPattern()});
  }
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(installed_.ok()) << installed_;
  }
  static int64_t Stat(const std::string& key) {
    for (const auto& [name, value] : MemoryStats(0)) {
      if (name == key) return value;
    }
    return -1;
  }
  static absl::Status installed_;
};
absl::Status TorchReplaceGpuTest::installed_;

TEST_F(TorchReplaceGpuTest, TrainingLoopRunsOnFragscope) {
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::get()->name(), "pluggable");
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::ReLU(),
                              torch::nn::Linear(1024, 10));
  model->to(torch::kCUDA);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < 20; ++step) {
    Mark(absl::StrCat("step ", step));
    auto x = torch::randn({64, 256}, torch::kCUDA);
    auto y = torch::randint(0, 10, {64},
                            torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
  }
  torch::cuda::synchronize();
  EXPECT_GT(Stat("allocation.all.allocated"), 100);
  EXPECT_GT(Stat("allocated_bytes.all.current"), 0) << "the model's parameters";
  EXPECT_GE(Stat("reserved_bytes.all.current"), Stat("allocated_bytes.all.current"));
  EXPECT_EQ(Stat("max_split_size"), 256 << 20);
  EXPECT_NE(MemorySummary(0).find("PyTorch CUDA memory summary, device ID 0"), std::string::npos);
  EXPECT_NE(MemorySnapshotJson(0).find("active_allocated"), std::string::npos);
}

TEST_F(TorchReplaceGpuTest, OutOfMemoryRaisesTorchsException) {
  try {
    auto huge = torch::empty({int64_t{1} << 48}, torch::TensorOptions().device(torch::kCUDA));
    FAIL() << "allocated 1 PiB";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("fragscope"), std::string::npos) << e.what();
  }
  EXPECT_GE(Stat("num_ooms"), 1);
  auto after = torch::ones({1024}, torch::kCUDA);  // still usable
  EXPECT_EQ(after.sum().item<float>(), 1024.0f);
}

TEST_F(TorchReplaceGpuTest, EmptyCacheAndLogReachFragscope) {
  Mark("phase 1");
  for (int i = 0; i < 200; ++i) {
    auto t = torch::empty({(i % 7 + 1) << 20},
                          torch::TensorOptions().device(torch::kCUDA).dtype(torch::kByte));
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  ASSERT_EQ(fragscope_flush(), 0);
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/fragscope_replace_gpu.", getpid(), ".0.fslog");
  absl::StatusOr<FslogReader> reader = FslogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::map<EventKind, int> kinds;
  LogEntry entry;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++kinds[entry.kind()];
  }
  EXPECT_GT(kinds[EventKind::kAlloc], 100);
  EXPECT_GT(kinds[EventKind::kSegmentAlloc], 0);
  EXPECT_GT(kinds[EventKind::kSegmentFree], 0) << "emptyCache reached fragscope_empty_cache";
  EXPECT_GE(kinds[EventKind::kMarker], 1);
}

}  // namespace
}  // namespace fragscope::torch_hooks
