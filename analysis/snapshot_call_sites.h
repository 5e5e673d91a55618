// The call sites of a PyTorch snapshot's allocations: for each alloc entry whose stack is known,
// the innermost frame of the user's code ("train.py:88 in forward"), so that reports name the code
// that holds a block rather than an event number.
//
// Where a stack comes from: the alloc entry's own `frames` when the snapshot was read whole; and
// for the blocks still allocated at the snapshot's moment (an OOM snapshot: the blocks that pinned
// the memory), the block's `frames` in `segments`, given to the last alloc of that address in the
// trace (the replay reads trace entries without their frames, for bounded memory).
//
// Which frame: PyTorch records the innermost first, Python and C++ mixed. The first Python frame
// outside torch's own package is the user's line; a stack with none (a job run from inside torch,
// a C++-only stack) gives its first Python frame, else its first frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/pytorch_snapshot.h"

namespace fragscope {

struct SnapshotCallSites {
  std::vector<std::string> texts;                  // site id - 1 -> its text; 0 = no site
  absl::flat_hash_map<size_t, uint32_t> by_entry;  // device trace position -> site id

  const std::string& Text(uint32_t site) const;
};

SnapshotCallSites CollectSnapshotCallSites(const PyTorchSnapshot& snapshot, size_t device);

// The frame a report names for `frames` (see above), as "file:line in name"; "" when empty.
std::string CallSiteText(const std::vector<SnapshotFrame>& frames);

}  // namespace fragscope
