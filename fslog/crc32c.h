// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), as used by iSCSI, ext4 and
// the .fslog chunk checksums (see fslog/FORMAT.md).
//
// Two implementations compute the same function:
//   - hardware: the SSE4.2 `crc32` instruction, 8 bytes per instruction, in three independent
//     streams (~21 GB/s on machine B; crc32c.cc, Note [Three-stream hardware CRC]); selected at
//     run time with __builtin_cpu_supports("sse4.2") on x86-64 (the code is compiled with a
//     target attribute, so the rest of the build needs no -msse4.2);
//   - software: slicing-by-8 tables, used on other CPUs and kept callable for tests.
//
// All functions are pure, allocation-free and async-signal-safe (the signal handler of the event
// log writer checksums its last chunk with them). The dispatch decision is made once, before
// main(), so no call ever initializes state lazily.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fragscope {

// Extends `crc` (the value returned for the preceding bytes, 0 for none) over `size` bytes.
// Crc32cExtend(Crc32cExtend(0, a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The individual implementations, for tests and benchmarks. Crc32cExtendHardware REQUIRES
// Crc32cHardwareAvailable().
uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t size);
uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t size);
bool Crc32cHardwareAvailable();

}  // namespace fragscope
