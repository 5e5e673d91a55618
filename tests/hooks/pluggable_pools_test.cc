// Private pools through the C ABI of libfragscope_alloc.so, driven as a CUDA-graph capture drives
// PyTorch's allocator (beginAllocateToPool, endAllocateToPool, releasePool), on a simulated
// device, with the log read back.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/pool_id.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/pluggable_allocator.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::hooks {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

cudaStream_t Stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

class PluggablePoolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fragscope_pools_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    log_ = (dir_ / "pools.fslog").string();
    ASSERT_EQ(fragscope_simulate(1 * kGiB, "", log_.c_str()), 0) << fragscope_last_error();
  }
  void TearDown() override {
    ResetPluggableAllocatorForTesting();
    std::filesystem::remove_all(dir_);
  }

  std::vector<LogEntry> Log() {
    EXPECT_EQ(fragscope_flush(), 0);
    testing::ReadResult result = testing::ReadFile(log_);
    EXPECT_TRUE(result.status.ok()) << result.status;
    return result.entries;
  }

  static int64_t Reserved() { return fragscope_stat(0, "reserved_bytes.all.current"); }

  std::filesystem::path dir_;
  std::string log_;
};

TEST_F(PluggablePoolsTest, RequestsOnTheCaptureStreamGoToThePoolAndAreReusedThere) {
  void* before = fragscope_malloc(4 * kMiB, 0, Stream(7));  // default pool, the same stream
  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 1, 0, Stream(7)), 0) << fragscope_last_error();
  EXPECT_EQ(fragscope_pool_use_count(0, 1, 0), 1);
  void* a = fragscope_malloc(4 * kMiB, 0, Stream(7));
  void* other = fragscope_malloc(4 * kMiB, 0, Stream(0));  // not the capturing stream
  void* b = fragscope_malloc(2 * kMiB, 0, Stream(7));
  fragscope_free(b, 0, 0, Stream(7));
  void* c = fragscope_malloc(2 * kMiB, 0, Stream(7));
  EXPECT_EQ(c, b) << "a block freed during the capture is reused within its pool";
  fragscope_free(before, 0, 0, Stream(7));
  void* d = fragscope_malloc(4 * kMiB, 0, Stream(7));
  EXPECT_NE(d, before) << "the default pool's free block is not the graph's";
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 1, 0), 0) << fragscope_last_error();
  void* after = fragscope_malloc(4 * kMiB, 0, Stream(7));
  EXPECT_EQ(after, before) << "after the capture the stream allocates in the default pool";

  std::vector<void*> in_pool;
  std::vector<void*> in_default;
  int pool_segments = 0;
  for (const LogEntry& e : Log()) {
    const AllocatorEvent event = e.event();
    if (e.kind() == EventKind::kAlloc) {
      EXPECT_TRUE(event.pool_id.is_default() || event.pool_id == (PoolId{1, 0}));
      (event.pool_id.is_default() ? in_default : in_pool)
          .push_back(reinterpret_cast<void*>(event.ptr));
    }
    if (e.kind() == EventKind::kSegmentAlloc && event.pool_id == PoolId{1, 0}) ++pool_segments;
  }
  EXPECT_EQ(in_pool, (std::vector<void*>{a, b, c, d}));
  EXPECT_EQ(in_default, (std::vector<void*>{before, other, after}));
  EXPECT_EQ(pool_segments, 1) << "4, 2 and 4 MiB fit in one 20 MiB segment";
  for (void* p : {a, c, d, other, after}) fragscope_free(p, 0, 0, Stream(0));
}

TEST_F(PluggablePoolsTest, ReleaseLetsEmptyCacheFreeThePoolsSegments) {
  void* warm = fragscope_malloc(30 * kMiB, 0, Stream(3));  // a default-pool segment, kept
  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 2, 0, Stream(3)), 0);
  void* kept = fragscope_malloc(1 * kMiB, 0, Stream(3));  // the graph's output, held
  void* temp = fragscope_malloc(40 * kMiB, 0, Stream(3));
  fragscope_free(temp, 0, 0, Stream(3));
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 2, 0), 0);
  const int64_t with_pool = Reserved();
  EXPECT_EQ(with_pool, int64_t{(30 + 2 + 40) * kMiB});

  fragscope_empty_cache();  // the graph lives: its pool keeps its segments
  EXPECT_EQ(Reserved(), with_pool);

  ASSERT_EQ(fragscope_release_pool(0, 2, 0), 0) << fragscope_last_error();
  EXPECT_EQ(fragscope_pool_use_count(0, 2, 0), 0);
  fragscope_empty_cache();  // the free 40 MiB segment goes; the output's small one stays
  EXPECT_EQ(Reserved(), int64_t{(30 + 2) * kMiB});
  fragscope_free(kept, 0, 0, Stream(3));
  fragscope_empty_cache();
  EXPECT_EQ(Reserved(), int64_t{30 * kMiB});
  EXPECT_EQ(fragscope_pool_use_count(0, 2, 0), -1) << "the pool is gone with its last segment";

  std::vector<uint64_t> freed_from_pool;
  for (const LogEntry& e : Log()) {
    if (e.kind() == EventKind::kSegmentFree && e.event().pool_id == PoolId{2, 0}) {
      freed_from_pool.push_back(e.event().bytes);
    }
  }
  EXPECT_EQ(freed_from_pool, (std::vector<uint64_t>{40 * kMiB, 2 * kMiB}));
  fragscope_free(warm, 0, 0, Stream(3));
}

TEST_F(PluggablePoolsTest, TwoGraphsShareAHandlesPool) {
  // torch.cuda.graph_pool_handle()'s (0, n), passed to two captures in turn.
  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 0, 1, Stream(5)), 0);
  void* first = fragscope_malloc(8 * kMiB, 0, Stream(5));
  fragscope_free(first, 0, 0, Stream(5));  // the first graph's temporary
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 0, 1), 0);
  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 0, 1, Stream(5)), 0);
  EXPECT_EQ(fragscope_pool_use_count(0, 0, 1), 2);
  void* second = fragscope_malloc(8 * kMiB, 0, Stream(5));
  EXPECT_EQ(second, first) << "the second capture reuses the first's freed block";
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 0, 1), 0);
  EXPECT_EQ(fragscope_stat(0, "segment.all.allocated"), 1);
  fragscope_free(second, 0, 0, Stream(5));

  ASSERT_EQ(fragscope_release_pool(0, 0, 1), 0);
  fragscope_empty_cache();
  EXPECT_EQ(Reserved(), int64_t{20 * kMiB}) << "one graph still uses the pool";
  ASSERT_EQ(fragscope_release_pool(0, 0, 1), 0);
  fragscope_empty_cache();
  EXPECT_EQ(Reserved(), 0);
}

TEST_F(PluggablePoolsTest, EmptyCacheDuringACaptureLeavesTheDefaultPoolAlone) {
  void* p = fragscope_malloc(4 * kMiB, 0, Stream(0));
  fragscope_free(p, 0, 0, Stream(0));
  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 1, 0, Stream(9)), 0);
  fragscope_empty_cache();  // PyTorch's emptyCache skips the default pool while capturing
  EXPECT_EQ(Reserved(), int64_t{20 * kMiB});
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 1, 0), 0);
  fragscope_empty_cache();
  EXPECT_EQ(Reserved(), 0);
}

TEST_F(PluggablePoolsTest, BadCallsFailNamingTheDevicePoolAndReason) {
  auto error = [] { return std::string(fragscope_last_error()); };
  EXPECT_EQ(fragscope_begin_allocate_to_pool(0, 0, 0, Stream(1)), -1);
  EXPECT_EQ(error(),
            "fragscope_begin_allocate_to_pool(device 0, pool (0, 0)): pool (0, 0) is the "
            "default pool, not a private pool");
  EXPECT_EQ(fragscope_begin_allocate_to_pool(0, uint64_t{1} << 32, 0, Stream(1)), -1);
  EXPECT_NE(error().find("pool (4294967296, 0): each counter must be below 2^32"),
            std::string::npos)
      << error();
  EXPECT_EQ(fragscope_end_allocate_to_pool(0, 1, 0), -1);
  EXPECT_NE(error().find("device 0 has no allocator yet"), std::string::npos) << error();
  EXPECT_EQ(fragscope_begin_allocate_to_pool(-1, 1, 0, Stream(1)), -1);
  EXPECT_NE(error().find("device -1"), std::string::npos) << error();

  ASSERT_EQ(fragscope_begin_allocate_to_pool(0, 1, 0, Stream(1)), 0);
  EXPECT_EQ(fragscope_begin_allocate_to_pool(0, 1, 0, Stream(1)), -1);
  EXPECT_NE(error().find("already recording to mempool_id"), std::string::npos) << error();
  ASSERT_EQ(fragscope_end_allocate_to_pool(0, 1, 0), 0);
  EXPECT_EQ(fragscope_end_allocate_to_pool(0, 1, 0), -1);
  EXPECT_NE(error().find("not currently recording"), std::string::npos) << error();
  EXPECT_EQ(fragscope_release_pool(0, 3, 0), -1);
  EXPECT_EQ(error(), "fragscope_release_pool(device 0, pool (3, 0)): no private pool (3, 0)");
  // The failed second begin still counted a user, as PyTorch's does: two releases empty it.
  ASSERT_EQ(fragscope_release_pool(0, 1, 0), 0);
  ASSERT_EQ(fragscope_release_pool(0, 1, 0), 0);
  EXPECT_EQ(fragscope_release_pool(0, 1, 0), -1);
  EXPECT_NE(error().find("already released"), std::string::npos) << error();
  EXPECT_EQ(fragscope_begin_allocate_to_pool(0, 1, 0, Stream(1)), -1);
  EXPECT_NE(error().find("cannot be used again"), std::string::npos) << error();
  EXPECT_EQ(fragscope_pool_use_count(0, 9, 9), -1);
}

}  // namespace
}  // namespace fragscope::hooks
