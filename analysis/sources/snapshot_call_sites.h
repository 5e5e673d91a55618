// The call sites of a PyTorch snapshot's allocations: for each alloc entry whose stack is known,
// the innermost frame of the user's code ("train.py:88 in forward", call_site_text.h), so that
// reports name the code that holds a block rather than an event number.
//
// Where a stack comes from: the alloc entry's own `frames` when the snapshot was read whole, or
// the call site the streamed read kept of them (SnapshotTraceEntry::call_site); and for the blocks
// still allocated at the snapshot's moment whose entry has none, the block's `frames` in
// `segments`, given to the last alloc of that address in the trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/sources/call_site_text.h"
#include "analysis/sources/pytorch_snapshot.h"

namespace fragscope {

struct SnapshotCallSites {
  std::vector<std::string> texts;  // site id - 1 -> its text; 0 = no site
  // Device trace position -> site id (0: none); empty when no entry has one.
  std::vector<uint32_t> by_entry;

  const std::string& Text(uint32_t site) const;
  uint32_t Site(size_t position) const {
    return position < by_entry.size() ? by_entry[position] : 0;
  }
};

SnapshotCallSites CollectSnapshotCallSites(const PyTorchSnapshot& snapshot, size_t device);

}  // namespace fragscope
