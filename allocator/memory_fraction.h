// The per-process memory fraction as bytes, the way PyTorch 2.11 computes it, and back.
//
// Note [The memory fraction's bytes]
// torch.cuda.set_per_process_memory_fraction(f) caps reserved memory at f * total truncated to
// bytes: PyTorch 2.11's DeviceCachingAllocator::setMemoryFraction stores
// static_cast<size_t>(f * static_cast<double>(totalGlobalMem)) (a cvttsd2si in libc10_cuda.so;
// not a rounding). A fraction computed as K / total for a round K (4 GiB / total) can therefore
// cap at K - 1 bytes, and a replay that rounds instead would let the job reach K exactly.
// getMemoryFraction() reports allowed / total, which truncation does not always map back to
// `allowed` either; logs therefore record FractionForAllowedBytes(allowed, total), a fraction that
// AllowedBytesForFraction turns into exactly the job's cap.
#pragma once

#include <cstdint>

namespace fragscope {

// PyTorch's cap for fraction `fraction` of `total` bytes: fraction * total, truncated.
// REQUIRES: 0 <= fraction <= 1.
uint64_t AllowedBytesForFraction(double fraction, uint64_t total);

// A fraction below 1 that AllowedBytesForFraction maps to exactly `allowed`: allowed / total when
// that one does, else (allowed + 0.5) / total; exact for every cap below 2^51 bytes. A cap of
// `total` or more gives the largest fraction below 1 (1 itself means no cap).
// REQUIRES: total > 0.
double FractionForAllowedBytes(uint64_t allowed, uint64_t total);

// The cap that a fraction reported by getMemoryFraction() (allowed / total) stands for: the
// nearest byte count, which undoes the division exactly below 2^51 bytes.
uint64_t AllowedBytesOfReportedFraction(double reported, uint64_t total);

}  // namespace fragscope
