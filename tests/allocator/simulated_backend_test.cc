// SimulatedBackend's device allocations: first fit in 2 MiB granules from the lowest address up
// or from the highest down, scripted addresses, and its errors. The randomized tests check every
// Malloc against a brute-force scan of the live ranges, which is what the backend's gap-free
// prefix (gapless_end_) and suffix (gapless_start_) must reproduce.
#include "allocator/simulated_backend.h"

#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

constexpr DevicePtr kBase = SimulatedBackend::kBaseAddress;
constexpr uint64_t kGranule = SimulatedBackend::kGranularityBytes;
constexpr uint64_t kTiB = uint64_t{1} << 40;

TEST(SimulatedBackendTest, FirstFitReusesTheLowestGapThatFits) {
  SimulatedBackend backend(kGiB);
  const DevicePtr a = *backend.Malloc(kGranule);
  const DevicePtr b = *backend.Malloc(3 * kGranule);
  const DevicePtr c = *backend.Malloc(1);  // rounded up to one granule
  EXPECT_EQ(a, kBase);
  EXPECT_EQ(b, kBase + kGranule);
  EXPECT_EQ(c, kBase + 4 * kGranule);
  ASSERT_TRUE(backend.Free(b).ok());
  EXPECT_EQ(*backend.Malloc(4 * kGranule), kBase + 5 * kGranule);  // the 3-granule gap is short
  EXPECT_EQ(*backend.Malloc(2 * kGranule), kBase + kGranule);      // into the gap
  ASSERT_TRUE(backend.Free(a).ok());
  EXPECT_EQ(*backend.Malloc(kGranule), kBase);
  EXPECT_EQ(*backend.Malloc(kGranule), kBase + 3 * kGranule);  // the rest of b's gap
}

TEST(SimulatedBackendTest, ErrorsNameTheProblem) {
  SimulatedBackend backend(4 * kGranule);
  EXPECT_TRUE(absl::IsInvalidArgument(backend.Malloc(0).status()));
  const DevicePtr a = *backend.Malloc(4 * kGranule);
  EXPECT_TRUE(absl::IsResourceExhausted(backend.Malloc(1).status()));
  absl::Status bad_free = backend.Free(a + kGranule);
  EXPECT_TRUE(absl::IsInvalidArgument(bad_free));
  EXPECT_NE(bad_free.message().find("not a live simulated allocation"), std::string::npos);
}

TEST(SimulatedBackendTest, ScriptedAddressesAreUsedAndCheckedForOverlap) {
  SimulatedBackend backend(kGiB);
  backend.ScriptAddresses({kBase + 8 * kGranule, kBase + 9 * kGranule});
  EXPECT_EQ(*backend.Malloc(kGranule), kBase + 8 * kGranule);
  absl::StatusOr<DevicePtr> overlap = backend.Malloc(kGranule);  // scripted 9: free, fine
  EXPECT_EQ(*overlap, kBase + 9 * kGranule);
  backend.ScriptAddresses({kBase + 8 * kGranule});
  EXPECT_TRUE(absl::IsInternal(backend.Malloc(kGranule).status()));
  // Unscripted allocations still fill the lowest gap, below the scripted ranges.
  EXPECT_EQ(*backend.Malloc(8 * kGranule), kBase);
  EXPECT_EQ(*backend.Malloc(kGranule), kBase + 10 * kGranule);
  // With the fallback, a taken address is dropped for first fit, and counted.
  backend.set_scripted_overlap_fallback(true);
  backend.ScriptAddresses({kBase + 8 * kGranule, kBase + 20 * kGranule});
  EXPECT_EQ(*backend.Malloc(kGranule), kBase + 11 * kGranule);
  EXPECT_EQ(backend.scripted_overlaps(), 1u);
  EXPECT_EQ(*backend.Malloc(kGranule), kBase + 20 * kGranule);  // the next one is free: used
  EXPECT_EQ(backend.scripted_overlaps(), 1u);
}

// The address a brute-force scan of the live ranges `model` gives `granular` bytes: from the base
// up (lowest first) or from the top down (highest first).
DevicePtr ScanForGap(const std::map<DevicePtr, uint64_t>& model, uint64_t granular,
                     AddressOrder order) {
  if (order == AddressOrder::kLowestFirst) {
    DevicePtr start = kBase;
    for (const auto& [ptr, size] : model) {
      if (ptr - start >= granular) break;
      start = ptr + size;
    }
    return start;
  }
  DevicePtr end = SimulatedBackend::kTopAddress;
  for (auto it = model.rbegin(); it != model.rend(); ++it) {
    if (end - (it->first + it->second) >= granular) break;
    end = it->first;
  }
  return end - granular;
}

// Random mallocs and frees, some at scripted addresses beyond everything live (above it, or below
// it from the top), against ScanForGap: what the backend's gap-free prefix (gapless_end_) or
// suffix (gapless_start_) must reproduce.
void CheckAgainstABruteForceScan(AddressOrder order) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    SimulatedBackend backend(1024 * kGiB, 0, order);
    std::map<DevicePtr, uint64_t> model;  // live ranges
    std::vector<DevicePtr> live;
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || rng() % 100 < 60) {
        const uint64_t bytes = (1 + rng() % 6) * kGranule - rng() % kGranule;
        const uint64_t granular = (bytes + kGranule - 1) / kGranule * kGranule;
        DevicePtr expected = ScanForGap(model, granular, order);
        if (rng() % 50 == 0) {
          const uint64_t slack = (rng() % 4) * kGranule;
          if (order == AddressOrder::kLowestFirst) {
            expected =
                (model.empty() ? kBase : model.rbegin()->first + model.rbegin()->second) + slack;
          } else {
            expected = (model.empty() ? SimulatedBackend::kTopAddress : model.begin()->first) -
                       granular - slack;
          }
          backend.ScriptAddresses({expected});
        }
        absl::StatusOr<DevicePtr> ptr = backend.Malloc(bytes);
        ASSERT_TRUE(ptr.ok()) << ptr.status();
        ASSERT_EQ(*ptr, expected) << "step " << step;
        model.emplace(*ptr, granular);
        live.push_back(*ptr);
      } else {
        const size_t i = rng() % live.size();
        ASSERT_TRUE(backend.Free(live[i]).ok());
        model.erase(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
    }
  }
}

TEST(SimulatedBackendTest, FirstFitMatchesABruteForceScan) {
  CheckAgainstABruteForceScan(AddressOrder::kLowestFirst);
}

TEST(SimulatedBackendTest, HighestFirstReusesTheHighestGapThatFits) {
  constexpr DevicePtr kTop = SimulatedBackend::kTopAddress;
  SimulatedBackend backend(kGiB, 0, AddressOrder::kHighestFirst);
  const DevicePtr a = *backend.Malloc(kGranule);
  const DevicePtr b = *backend.Malloc(3 * kGranule);
  const DevicePtr c = *backend.Malloc(1);  // rounded up to one granule
  EXPECT_EQ(a, kTop - kGranule);
  EXPECT_EQ(b, kTop - 4 * kGranule);
  EXPECT_EQ(c, kTop - 5 * kGranule);
  ASSERT_TRUE(backend.Free(b).ok());
  EXPECT_EQ(*backend.Malloc(4 * kGranule), kTop - 9 * kGranule);  // the 3-granule gap is short
  EXPECT_EQ(*backend.Malloc(2 * kGranule), kTop - 3 * kGranule);  // the gap's top part
  ASSERT_TRUE(backend.Free(a).ok());
  EXPECT_EQ(*backend.Malloc(kGranule), kTop - kGranule);
  EXPECT_EQ(*backend.Malloc(kGranule), kTop - 4 * kGranule);  // the rest of b's gap
}

// A Malloc range cut into holes smaller than a request (pins every TiB, scripted) leaves no room
// below the top for it: top-down placement would go below kBaseAddress, where virtual-memory
// reservations lie, so the request takes the lowest gap above instead (past the last pin).
TEST(SimulatedBackendTest, HighestFirstNeverGoesBelowTheBase) {
  SimulatedBackend backend(SimulatedBackend::kMaxCapacityBytes, 0, AddressOrder::kHighestFirst);
  std::vector<DevicePtr> pins;
  for (uint64_t i = 0; i <= 8; ++i) pins.push_back(kBase + i * kTiB);
  ASSERT_EQ(pins.back(), SimulatedBackend::kTopAddress);
  backend.ScriptAddresses(pins);
  for (DevicePtr pin : pins) ASSERT_EQ(*backend.Malloc(kGranule), pin);
  EXPECT_EQ(*backend.Malloc(3 * kTiB / 2), SimulatedBackend::kTopAddress + kGranule);
  EXPECT_EQ(*backend.Malloc(kTiB / 2), kBase + 8 * kTiB - kTiB / 2);  // a hole fits it: top down
}

TEST(SimulatedBackendTest, HighestFirstMatchesABruteForceScan) {
  CheckAgainstABruteForceScan(AddressOrder::kHighestFirst);
}

}  // namespace
}  // namespace fragscope
