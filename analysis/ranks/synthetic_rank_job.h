// SyntheticRankJob: one rank of a synthetic data-parallel training job written as an .fslog, for
// the cross-rank tests and the many-rank benchmark (bench/rank_logs_generator.cc).
//
// Each step marks "step N / forward", "step N / backward" and "step N / optimizer": persistent
// weights at the start; per layer, activations (sizes drawn per step from the rank's own seed, so
// ranks differ a little, as real ranks do) and short-lived temporaries in the forward pass, the
// activations freed in reverse in the backward pass, gradients created there at the first step,
// and optimizer state created in the first optimizer phase. A rank can be made to stand out: more
// optimizer state (an uneven shard), memory held outside the allocator when its log opened (the
// header's free memory, format 2.3), or the pipeline stage's extra activations.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/types.h"

namespace fragscope {

struct SyntheticRankSpec {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = -1;
  int32_t pp_size = 0;  // recorded in the header; 0 = not given
  int32_t tp_size = 0;
  std::string host = "node-0";
  uint64_t events = 100'000;  // written until at least this many
  uint64_t capacity_bytes = 80 * kGiB;
  uint64_t outside_bytes = 512 * kMiB;  // held outside the allocator at open
  uint64_t extra_optimizer_bytes = 0;   // more optimizer state than the other ranks
  uint64_t extra_activation_bytes = 0;  // per layer, e.g. a later pipeline stage's
  int layers = 24;
  uint64_t weight_bytes = 2 * kGiB;  // persistent weights (gradients as many)
  int64_t start_wall_ns = 1'700'000'000'000'000'000;
};

// Writes the rank's log to `path`; returns the number of events written. Errors: the file.
absl::StatusOr<uint64_t> WriteSyntheticRankLog(const std::string& path,
                                               const SyntheticRankSpec& spec);

}  // namespace fragscope
