// CRC32C: SSE4.2 instruction path and slicing-by-8 table path. See crc32c.h.
#include "allocator/crc32c.h"

#include <array>
#include <cstring>

namespace fragscope {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected 0x1EDC6F41

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC of byte b followed by
// k zero bytes, which lets the software path fold 8 bytes per step.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = tables[k - 1][b];
      tables[k][b] = (prev >> 8) ^ tables[0][prev & 0xFF];
    }
  }
  return tables;
}

constexpr std::array<std::array<uint32_t, 256>, 8> kTables = MakeTables();

uint64_t LoadLittleEndian64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // the format is little-endian and so are the supported hosts
  return v;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const unsigned char* p,
                                                       size_t size) {
  uint64_t c = ~crc;
  // Align to 8 bytes so the 8-byte loads below never straddle a cache line needlessly.
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --size;
  }
  // Three independent 8-byte streams would hide the instruction's 3-cycle latency, but need a
  // combine step; one stream already runs at ~8 GB/s, far above what the reader needs.
  while (size >= 32) {
    c = __builtin_ia32_crc32di(c, LoadLittleEndian64(p));
    c = __builtin_ia32_crc32di(c, LoadLittleEndian64(p + 8));
    c = __builtin_ia32_crc32di(c, LoadLittleEndian64(p + 16));
    c = __builtin_ia32_crc32di(c, LoadLittleEndian64(p + 24));
    p += 32;
    size -= 32;
  }
  while (size >= 8) {
    c = __builtin_ia32_crc32di(c, LoadLittleEndian64(p));
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --size;
  }
  return ~static_cast<uint32_t>(c);
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#else
bool DetectSse42() { return false; }
#endif

// Decided during static initialization, so Crc32cExtend never initializes anything lazily (it
// must be async-signal-safe). Until then (calls from other static initializers) the software
// path is used, which computes the same value.
const bool g_use_hardware = DetectSse42();

}  // namespace

uint32_t Crc32cExtendSoftware(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    const uint64_t v = LoadLittleEndian64(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    --size;
  }
  return ~c;
}

uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  return ExtendSse42(crc, static_cast<const unsigned char*>(data), size);
#else
  return Crc32cExtendSoftware(crc, data, size);
#endif
}

bool Crc32cHardwareAvailable() { return g_use_hardware; }

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  return g_use_hardware ? Crc32cExtendHardware(crc, data, size)
                        : Crc32cExtendSoftware(crc, data, size);
}

}  // namespace fragscope
