#include "fslog/crc32c.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fragscope {
namespace {

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

std::vector<std::pair<std::string, ExtendFn>> Implementations() {
  std::vector<std::pair<std::string, ExtendFn>> impls = {{"software", &Crc32cExtendSoftware},
                                                         {"dispatch", &Crc32cExtend}};
  if (Crc32cHardwareAvailable()) impls.push_back({"sse4.2", &Crc32cExtendHardware});
  return impls;
}

// RFC 3720 (iSCSI) appendix B.4 vectors and the classic "123456789" check value.
TEST(Crc32cTest, KnownVectors) {
  std::string zeros(32, '\0');
  std::string ones(32, '\xff');
  std::string ascending(32, '\0');
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[static_cast<size_t>(i)] = static_cast<char>(i);
    descending[static_cast<size_t>(i)] = static_cast<char>(31 - i);
  }
  for (const auto& [name, extend] : Implementations()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(extend(0, "", 0), 0u);
    EXPECT_EQ(extend(0, "123456789", 9), 0xE3069283u);
    EXPECT_EQ(extend(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(extend(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(extend(0, ascending.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(extend(0, descending.data(), 32), 0x113FDB5Cu);
  }
}

TEST(Crc32cTest, ImplementationsAgreeOnEveryLengthAndAlignment) {
  std::mt19937_64 rng(12345);
  std::vector<unsigned char> data(4096 + 16);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const auto impls = Implementations();
  for (size_t align = 0; align < 8; ++align) {
    for (size_t size = 0; size < 300; ++size) {
      const uint32_t expected = Crc32cExtendSoftware(0, data.data() + align, size);
      for (const auto& [name, extend] : impls) {
        ASSERT_EQ(extend(0, data.data() + align, size), expected)
            << name << " align " << align << " size " << size;
      }
    }
  }
  const uint32_t big = Crc32cExtendSoftware(0, data.data() + 3, 4096);
  for (const auto& [name, extend] : impls) EXPECT_EQ(extend(0, data.data() + 3, 4096), big) << name;
}

// The hardware path joins three streams per group of 3 x 256 and 3 x 8192 bytes (crc32c.cc, Note
// [Three-stream hardware CRC]): lengths on and around every group boundary, up to a whole chunk.
TEST(Crc32cTest, ImplementationsAgreeAcrossThreeStreamGroups) {
  std::mt19937_64 rng(777);
  std::vector<unsigned char> data(3 * 3 * 8192 + 4096);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> sizes = {65536 - 32, 65536, 3 * 3 * 8192 + 1000};
  for (const size_t group : {size_t{3 * 256}, size_t{3 * 8192}}) {
    for (size_t n = 1; n <= 3; ++n) {
      for (size_t delta = 0; delta <= 16; ++delta) {
        sizes.push_back(n * group + delta);
        sizes.push_back(n * group - delta);
      }
    }
  }
  const auto impls = Implementations();
  for (const size_t align : {size_t{0}, size_t{5}}) {
    for (const size_t size : sizes) {
      ASSERT_LE(align + size, data.size());
      const uint32_t expected = Crc32cExtendSoftware(0x12345678, data.data() + align, size);
      for (const auto& [name, extend] : impls) {
        ASSERT_EQ(extend(0x12345678, data.data() + align, size), expected)
            << name << " align " << align << " size " << size;
      }
    }
  }
}

TEST(Crc32cTest, ExtendingEqualsOneCall) {
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const uint32_t first = Crc32c(text.data(), cut);
    EXPECT_EQ(Crc32cExtend(first, text.data() + cut, text.size() - cut), Crc32c(text));
  }
}

}  // namespace
}  // namespace fragscope
