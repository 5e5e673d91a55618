// instruction_counts: fixed amounts of the benchmarks' work, for counting instructions, branch
// mispredictions and cache misses with cachegrind (bench/cachegrind_counts.sh) where timings are
// too noisy to compare two builds: a shared VM moves the same binary's timings by 2x from one
// minute to the next, while cachegrind's counts are the same on every run.
//
//   instruction_counts random MAX_LIVE MAX_SIZE_MIB STEPS [uncapped]
//       STEPS steps of BM_RandomAllocations' mix (bench/random_mix.h); uncapped: without RMM's
//       16000 MiB cap (BM_RandomAllocationsUncapped)
//   instruction_counts pair BYTES PAIRS
//       PAIRS warm malloc+free pairs of BYTES (BM_WarmPair)
//   instruction_counts replay LOG
//       LOG replayed on the calling thread with no hooks (BM_ReplayFslogCallingThread)
//
// Each prints what it did (live blocks, events) on stdout. Exit status 2 on bad arguments.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/fslog_source.h"
#include "bench/random_mix.h"

namespace fragscope {
namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: instruction_counts random MAX_LIVE MAX_SIZE_MIB STEPS [uncapped]\n"
               "       instruction_counts pair BYTES PAIRS\n"
               "       instruction_counts replay LOG\n");
  return 2;
}

bool ParsePositive(const char* text, uint64_t* value) {
  return absl::SimpleAtoi(text, value) && *value > 0;
}

// Prints "MODE: message" on stderr; returns the exit status of a failed run.
int Fail(const char* mode, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", mode, std::string(status.message()).c_str());
  return 1;
}

int RunRandom(uint64_t max_live, uint64_t max_size_mib, uint64_t steps, uint64_t cap_bytes) {
  SimulatedBackend backend(RandomAllocationMix::DeviceBytesFor(cap_bytes));
  CachingAllocator allocator(backend, AllocatorOptions{});
  RandomAllocationMix mix(allocator, max_live, max_size_mib * kMiB, cap_bytes);
  for (uint64_t i = 0; i < steps; ++i) mix.Step();
  std::printf("random: %llu steps, %zu live blocks at the end\n",
              static_cast<unsigned long long>(steps), mix.live_blocks());
  return 0;
}

int RunPairs(uint64_t bytes, uint64_t pairs) {
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, AllocatorOptions{});
  for (uint64_t i = 0; i < pairs; ++i) {
    absl::StatusOr<DevicePtr> p = allocator.Allocate(bytes, 0);
    if (!p.ok()) return Fail("pair", p.status());
    (void)allocator.Free(*p);
  }
  std::printf("pair: %llu pairs of %llu bytes\n", static_cast<unsigned long long>(pairs),
              static_cast<unsigned long long>(bytes));
  return 0;
}

int RunReplay(const char* path) {
  absl::StatusOr<std::unique_ptr<FslogSource>> source =
      FslogSource::Open(path, FslogReading::kCallingThread);
  if (!source.ok()) return Fail("replay", source.status());
  ReplayConfig config;
  config.capacity_bytes = (*source)->info().capacity_bytes;  // the log header's
  Replayer replayer(**source, config);
  if (absl::Status s = replayer.Init(); !s.ok()) return Fail("replay", s);
  if (absl::Status s = replayer.Run(nullptr); !s.ok()) return Fail("replay", s);
  std::printf("replay: %llu events\n", static_cast<unsigned long long>(replayer.events_read()));
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string mode = argv[1];
  uint64_t a = 0, b = 0, c = 0;
  const bool uncapped = argc == 6 && std::string(argv[5]) == "uncapped";
  if (mode == "random" && (argc == 5 || uncapped) && ParsePositive(argv[2], &a) &&
      ParsePositive(argv[3], &b) && ParsePositive(argv[4], &c)) {
    return RunRandom(
        a, b, c, uncapped ? RandomAllocationMix::kUncappedBytes : RandomAllocationMix::kCapBytes);
  }
  if (mode == "pair" && argc == 4 && ParsePositive(argv[2], &a) && ParsePositive(argv[3], &b)) {
    return RunPairs(a, b);
  }
  if (mode == "replay" && argc == 3) return RunReplay(argv[2]);
  return Usage();
}

}  // namespace
}  // namespace fragscope

int main(int argc, char** argv) { return fragscope::Main(argc, argv); }
