// CRC32C: SSE4.2 instruction path and slicing-by-8 table path. See crc32c.h.
#include "fslog/crc32c.h"

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

// Note [Three-stream hardware CRC]
// The crc32 instruction has a latency of 3 cycles and a throughput of one per cycle, so one
// dependent chain runs at a third of the unit's speed (~8 GB/s on machine B). The hardware path
// checksums three adjacent blocks of n bytes as three independent chains (the second and third
// from a zero register) and joins them: the register after A||B is Z_n(register after A) ^
// (register of B from zero), because the register update is linear over GF(2); Z_n, "append n
// zero bytes", is a 32x32 bit matrix applied through four 256-entry tables (ShiftTable). As in
// Mark Adler's crc32c.c, with n = 8 KiB for long inputs and 256 bytes for the rest.

// A linear operator on the 32-bit CRC register: column i is the image of bit i.
using Gf2Matrix = std::array<uint32_t, 32>;

constexpr uint32_t Apply(const Gf2Matrix& m, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) out ^= m[static_cast<size_t>(i)];
  }
  return out;
}

constexpr Gf2Matrix Compose(const Gf2Matrix& a, const Gf2Matrix& b) {  // a after b
  Gf2Matrix out{};
  for (size_t i = 0; i < 32; ++i) out[i] = Apply(a, b[i]);
  return out;
}

// The operator that appends `bytes` zero bytes to the (raw, uninverted) register.
constexpr Gf2Matrix ZeroBytesOperator(size_t bytes) {
  Gf2Matrix bit{};  // one zero bit: shift right, folding the polynomial in for bit 0
  bit[0] = kPolynomial;
  for (size_t i = 1; i < 32; ++i) bit[i] = uint32_t{1} << (i - 1);
  Gf2Matrix power = Compose(bit, bit);
  power = Compose(power, power);
  power = Compose(power, power);  // one zero byte
  Gf2Matrix result{};
  for (size_t i = 0; i < 32; ++i) result[i] = uint32_t{1} << i;  // identity
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = Compose(power, result);
    power = Compose(power, power);
  }
  return result;
}

struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> byte;  // byte[k][b]: the operator applied to b << 8k
  uint32_t Apply(uint32_t crc) const {
    return byte[0][crc & 0xFF] ^ byte[1][(crc >> 8) & 0xFF] ^ byte[2][(crc >> 16) & 0xFF] ^
           byte[3][crc >> 24];
  }
};

constexpr ShiftTable MakeShiftTable(size_t bytes) {
  const Gf2Matrix op = ZeroBytesOperator(bytes);
  ShiftTable table{};
  for (size_t k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) table.byte[k][b] = fragscope::Apply(op, b << (8 * k));
  }
  return table;
}

constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;
constexpr ShiftTable kShiftLong = MakeShiftTable(kLongBlock);
constexpr ShiftTable kShiftShort = MakeShiftTable(kShortBlock);

#if defined(__x86_64__)
// Consumes as many whole groups of three `block`-byte blocks as `*size` holds.
__attribute__((target("sse4.2"))) inline uint64_t ExtendThreeStreams(uint64_t c,
                                                                     const unsigned char** p,
                                                                     size_t* size, size_t block,
                                                                     const ShiftTable& shift) {
  while (*size >= 3 * block) {
    uint64_t c1 = 0;
    uint64_t c2 = 0;
    const unsigned char* q = *p;
    for (const unsigned char* end = q + block; q < end; q += 8) {
      c = __builtin_ia32_crc32di(c, LoadLittleEndian64(q));
      c1 = __builtin_ia32_crc32di(c1, LoadLittleEndian64(q + block));
      c2 = __builtin_ia32_crc32di(c2, LoadLittleEndian64(q + 2 * block));
    }
    c = shift.Apply(static_cast<uint32_t>(c)) ^ c1;
    c = shift.Apply(static_cast<uint32_t>(c)) ^ c2;
    *p += 3 * block;
    *size -= 3 * block;
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const unsigned char* p,
                                                       size_t size) {
  uint64_t c = ~crc;
  // Align to 8 bytes so the 8-byte loads below never straddle a cache line needlessly.
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --size;
  }
  c = ExtendThreeStreams(c, &p, &size, kLongBlock, kShiftLong);  // Note [Three-stream ...]
  c = ExtendThreeStreams(c, &p, &size, kShortBlock, kShiftShort);
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
