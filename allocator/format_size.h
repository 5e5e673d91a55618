// Byte counts as PyTorch prints them (c10 format_size): "N bytes" up to 1024, then KiB, MiB or
// GiB with two decimals. Used for the OOM message and memory_summary, so the text matches
// PyTorch's exactly.
#pragma once

#include <cstdint>
#include <string>

namespace fragscope {

std::string FormatSize(uint64_t bytes);

}  // namespace fragscope
