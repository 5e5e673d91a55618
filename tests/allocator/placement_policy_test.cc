// The placement policies: PyTorch's best fit (the default) against address-ordered first fit.
#include "allocator/caching_allocator.h"
#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

class PlacementPolicyTest : public testing::AllocatorFixture {
 protected:
  // One 2 MiB small-pool segment: a(100K) hole(300K) c(100K) hole(100K) e(100K) free tail.
  // Returns the address of the 300K hole and of the 100K hole.
  std::pair<DevicePtr, DevicePtr> MakeTwoHoles() {
    Alloc(100 * kKiB);
    const DevicePtr b = Alloc(300 * kKiB);
    Alloc(100 * kKiB);
    const DevicePtr d = Alloc(100 * kKiB);
    Alloc(100 * kKiB);
    Free(b);
    Free(d);
    return {b, d};
  }
};

TEST_F(PlacementPolicyTest, BestFitTakesTheSmallestHole) {
  Init("");
  auto [big_hole, small_hole] = MakeTwoHoles();
  EXPECT_EQ(Alloc(100 * kKiB), small_hole);
}

TEST_F(PlacementPolicyTest, FirstFitTakesTheLowestAddress) {
  Init("placement:first_fit");
  auto [big_hole, small_hole] = MakeTwoHoles();
  EXPECT_EQ(Alloc(100 * kKiB), big_hole);  // split: the front 100K of the 300K hole
  EXPECT_EQ(Alloc(100 * kKiB), big_hole + 100 * kKiB);
  EXPECT_EQ(Alloc(100 * kKiB), big_hole + 200 * kKiB);
  EXPECT_EQ(Alloc(100 * kKiB), small_hole);
  EXPECT_EQ(Stats().segment[0].current, 1);
}

TEST_F(PlacementPolicyTest, FirstFitStaysOnTheRequestStream) {
  Init("placement:first_fit");
  const DevicePtr on_a = Alloc(100 * kKiB, /*stream=*/0xa);
  Free(on_a);
  const DevicePtr on_b = Alloc(100 * kKiB, /*stream=*/0xb);
  EXPECT_NE(on_b, on_a);
  EXPECT_EQ(Stats().segment[0].current, 2);
}

// Best fit rejects outright when its candidate is oversize; first fit moves on to a block the
// rules allow.
TEST_F(PlacementPolicyTest, FirstFitSkipsBlocksTheOversizeRuleForbids) {
  Init("placement:first_fit,max_split_size_mb:40");
  const DevicePtr oversize = Alloc(64 * kMiB);  // oversize segment, lower address
  const DevicePtr small_segment = Alloc(12 * kMiB);
  Free(oversize);
  Free(small_segment);
  // 8 MiB < max_split: the 64 MiB block may not serve it, the 12 MiB one may.
  EXPECT_EQ(Alloc(8 * kMiB), small_segment);
}

TEST_F(PlacementPolicyTest, SwitchingPolicyAtRunTimeRebuildsTheIndex) {
  Init("");
  auto [big_hole, small_hole] = MakeTwoHoles();
  absl::StatusOr<AllocatorOptions> first_fit = ParseAllocatorOptions("placement:first_fit");
  ASSERT_TRUE(first_fit.ok());
  allocator_->SetOptions(*first_fit);
  Check();
  EXPECT_EQ(Alloc(100 * kKiB), big_hole);
  allocator_->SetOptions(AllocatorOptions{});
  Check();
  EXPECT_EQ(Alloc(100 * kKiB), small_hole);
}

}  // namespace
}  // namespace fragscope
