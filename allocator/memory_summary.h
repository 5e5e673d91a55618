// MemorySummary: the text table of torch.cuda.memory_summary(), from DeviceStats.
//
// Same rows, units and layout as PyTorch's (torch/cuda/memory.py), 75 columns plus borders, so a
// user can put fragscope's output beside PyTorch's. Row meanings are in allocator/README.md.
#pragma once

#include <string>

#include "allocator/device_stats.h"

namespace fragscope {

// abbreviated: only the "all" row of each metric, as memory_summary(abbreviated=True).
std::string MemorySummary(const DeviceStats& stats, int device, bool abbreviated = false);

}  // namespace fragscope
