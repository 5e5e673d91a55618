#include "analysis/ranks/synthetic_rank_job.h"

#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/report/fslog_file_writer.h"

namespace fragscope {

absl::StatusOr<uint64_t> WriteSyntheticRankLog(const std::string& path,
                                               const SyntheticRankSpec& spec) {
  FslogHeader header;
  header.device_total_bytes = spec.capacity_bytes;
  header.device_name = "synthetic GPU";
  header.host = spec.host;
  header.rank = spec.rank;
  header.local_rank = spec.local_rank;
  header.world_size = spec.world_size;
  header.pp_size = spec.pp_size;
  header.tp_size = spec.tp_size;
  header.pid = 1000 + spec.rank;
  header.start_wall_ns = spec.start_wall_ns;
  header.start_monotonic_ns = 1'000'000'000;
  header.device_free_at_open_bytes = spec.capacity_bytes - spec.outside_bytes;
  header.reserved_at_open_bytes = 0;
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> opened = FslogFileWriter::Open(path, header);
  if (!opened.ok()) return opened.status();
  FslogFileWriter& log = **opened;
  // The device as the log says: its memory less what is held outside the allocator.
  SimulatedBackend backend(spec.capacity_bytes - spec.outside_bytes);
  CachingAllocator allocator(backend, AllocatorOptions());
  allocator.AddObserver(&log);
  std::mt19937_64 rng(0x5eed0000 + static_cast<uint64_t>(spec.rank));
  uint64_t now = 0;
  const auto alloc = [&](uint64_t bytes) {
    log.set_time_ns(now += 400);
    absl::StatusOr<DevicePtr> p = allocator.Allocate(bytes, 0);
    return p.ok() ? *p : DevicePtr{0};
  };
  const auto release = [&](DevicePtr p) {
    log.set_time_ns(now += 400);
    if (p != 0) (void)allocator.Free(p);
  };
  std::vector<DevicePtr> kept;
  const uint64_t weight = spec.weight_bytes / static_cast<uint64_t>(spec.layers);
  for (int l = 0; l < spec.layers; ++l) kept.push_back(alloc(weight));
  std::vector<DevicePtr> saved;
  for (uint64_t step = 0; log.events() < spec.events; ++step) {
    log.Mark(absl::StrFormat("step %d / forward", step), now);
    const uint64_t seq = 768 + 64 * (rng() % 3);
    for (int l = 0; l < spec.layers; ++l) {
      for (int t = 0; t < 4; ++t)
        saved.push_back(alloc(seq * (16 + 4 * static_cast<uint64_t>(t)) * 1024));
      if (spec.extra_activation_bytes > 0) saved.push_back(alloc(spec.extra_activation_bytes));
      for (int t = 0; t < 6; ++t) release(alloc(4096 + rng() % (512 * 1024)));
    }
    log.Mark(absl::StrFormat("step %d / backward", step), now);
    while (!saved.empty()) {
      if (step == 0 && saved.size() % 5 == 0) kept.push_back(alloc(weight / 4));  // gradients
      release(saved.back());
      saved.pop_back();
      release(alloc(8192 + rng() % (256 * 1024)));
    }
    log.Mark(absl::StrFormat("step %d / optimizer", step), now);
    if (step == 0) {
      for (int l = 0; l < spec.layers; ++l) kept.push_back(alloc(2 * weight));  // Adam moments
      if (spec.extra_optimizer_bytes > 0) kept.push_back(alloc(spec.extra_optimizer_bytes));
    }
    for (int l = 0; l < spec.layers; ++l) release(alloc(weight / 8));
  }
  allocator.RemoveObserver(&log);
  const uint64_t written = log.events();
  if (absl::Status s = log.Close(); !s.ok()) return s;
  return written;
}

}  // namespace fragscope
