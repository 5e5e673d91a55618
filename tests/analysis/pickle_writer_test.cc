// Tests of the pickle writer (analysis/sources/pickle/pickle_writer.h): writer -> reader round
// trips, the opcodes it emits, and (with FRAGSCOPE_PICKLE_WRITER_OUT set) files for
// verify_writer.py.
#include "analysis/sources/pickle/pickle_writer.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/sources/pickle/pickle_opcodes.h"
#include "analysis/sources/pickle/pickle_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/pickle_test_util.h"

namespace fragscope::pickle {
namespace {

using ::fragscope::testing::D;
using ::fragscope::testing::DataPath;
using ::fragscope::testing::I;
using ::fragscope::testing::L;
using ::fragscope::testing::ReadFileOrDie;
using ::fragscope::testing::S;
using ::fragscope::testing::T;
using ::testing::HasSubstr;

PickleValue FixtureValue(const std::string& file) {
  absl::StatusOr<PickleValue> v = ReadPickle(ReadFileOrDie(DataPath("pickle/" + file)));
  if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  return *v;
}

std::string WriteOrDie(const PickleValue& v, int protocol) {
  PickleWriteOptions options;
  options.protocol = protocol;
  absl::StatusOr<std::string> bytes = WritePickle(v, options);
  if (!bytes.ok()) throw std::runtime_error(std::string(bytes.status().message()));
  return *bytes;
}

TEST(PickleWriterTest, RoundTripsEveryFixtureInEveryProtocol) {
  for (const std::string file : {"snapshot.p4.pickle", "scalars.p4.pickle", "bytes.p4.pickle",
                                 "batches.p4.pickle", "large.p4.pickle"}) {
    const PickleValue value = FixtureValue(file);
    for (const int protocol : {2, 3, 4, 5}) {
      if (protocol == 2 && file == "bytes.p4.pickle") continue;
      SCOPED_TRACE(absl::StrCat(file, " protocol ", protocol));
      const std::string bytes = WriteOrDie(value, protocol);
      EXPECT_EQ(static_cast<uint8_t>(bytes[1]), protocol);
      absl::StatusOr<PickleValue> back = ReadPickle(bytes);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, value);
      EXPECT_EQ(DebugString(*back), DebugString(value));
    }
  }
}

TEST(PickleWriterTest, EmitsWhatCPythonEmitsForSmallValues) {
  // pickle.dumps({'a': [1, (2, 3)], 'b': None}, protocol=4) apart from memoizing unshared lists,
  // which CPython does and we skip: FRAME, SHORT_BINUNICODE, MEMOIZE, BININT1, TUPLE2, SETITEMS.
  const PickleValue value = D({{"a", L({I(1), T({I(2), I(3)})})}, {"b", {}}});
  const std::string bytes = WriteOrDie(value, 4);
  const std::string expected = fragscope::testing::Bytes(
      {0x80, 4,   0x95, 23, 0,   0, 0,   0, 0,    0,   0,    '}', '(', 0x8c, 1,   'a', 0x94,
       ']',  '(', 'K',  1,  'K', 2, 'K', 3, 0x86, 'e', 0x8c, 1,   'b', 0x94, 'N', 'u', '.'});
  EXPECT_EQ(bytes, expected);
  // Protocol 2, as LibTorch writes: no FRAME, BINUNICODE, BINPUT.
  const std::string p2 = WriteOrDie(D({{"a", I(-2)}}), 2);
  EXPECT_EQ(p2, fragscope::testing::Bytes({0x80, 2, '}', 'X', 1, 0, 0, 0, 'a', 'q', 0, 'J', 0xfe,
                                           0xff, 0xff, 0xff, 's', '.'}));
}

TEST(PickleWriterTest, EncodesIntegersMinimally) {
  const std::vector<std::pair<int64_t, size_t>> cases = {
      {0, 2},          {255, 2},        {256, 3},         {65535, 3},      {65536, 5},     {-1, 5},
      {2147483647, 5}, {2147483648, 7}, {-2147483649, 7}, {INT64_MAX, 10}, {INT64_MIN, 10}};
  for (const auto& [value, opcode_bytes] : cases) {
    const std::string bytes = WriteOrDie(I(value), 2);
    EXPECT_EQ(bytes.size(), 2 + opcode_bytes + 1) << value;  // PROTO 2, value, STOP
    EXPECT_EQ(ReadPickle(bytes)->int_value(), value);
  }
}

TEST(PickleWriterTest, WritesSharedStringsAndContainersOnce) {
  // 300 distinct strings used twice each: the second use is a BINGET, past 256 a LONG_BINGET.
  PickleValue::Items items;
  std::vector<PickleValue> strings;
  for (int i = 0; i < 300; ++i) strings.push_back(S(absl::StrCat("s", i)));
  for (int round = 0; round < 2; ++round) {
    for (const PickleValue& s : strings) items.push_back(s);
  }
  const PickleValue shared = L({I(7)});
  items.push_back(shared);
  items.push_back(shared);
  const PickleValue value = L(std::move(items));
  for (const int protocol : {2, 4}) {
    const std::string bytes = WriteOrDie(value, protocol);
    EXPECT_NE(bytes.find(fragscope::testing::Bytes({'j', 0x00, 0x01, 0, 0})), std::string::npos);
    EXPECT_NE(bytes.find(fragscope::testing::Bytes({'j', 0x2c, 0x01, 0, 0})), std::string::npos);
    EXPECT_EQ(bytes.find("s299", bytes.find("s299") + 1), std::string::npos);  // written once
    absl::StatusOr<PickleValue> back = ReadPickle(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, value);
    EXPECT_EQ(back->items()[600].identity(), back->items()[601].identity());
  }
}

TEST(PickleWriterTest, KeepsExponentiallySharedTreesSmall) {
  PickleValue v = L({});
  for (int i = 0; i < 60; ++i) v = L({v, v});
  const std::string bytes = WriteOrDie(v, 4);
  EXPECT_LT(bytes.size(), 1000u);
  EXPECT_TRUE(ReadPickle(bytes).ok());
}

TEST(PickleWriterTest, FramesLargeOutput) {
  const PickleValue value = FixtureValue("large.p4.pickle");
  const std::string bytes = WriteOrDie(value, 4);
  // Two frames as in CPython's output: a little over 64 KiB, then the rest.
  ASSERT_EQ(static_cast<uint8_t>(bytes[2]), op::kFrame);
  uint64_t first = 0;
  for (size_t i = 0; i < 8; ++i) first |= uint64_t{static_cast<uint8_t>(bytes[3 + i])} << (8 * i);
  EXPECT_GE(first, 65536u);
  ASSERT_LT(11 + first, bytes.size());
  EXPECT_EQ(static_cast<uint8_t>(bytes[11 + first]), op::kFrame);
  EXPECT_NE(static_cast<uint8_t>(WriteOrDie(value, 2)[2]), op::kFrame);
}

TEST(PickleWriterTest, RefusesWhatTheProtocolCannotSay) {
  PickleWriteOptions p2;
  p2.protocol = 2;
  EXPECT_THAT(WritePickle(PickleValue::Bytes("x"), p2).status().message(),
              HasSubstr("bytes need protocol 3"));
  PickleWriteOptions p1;
  p1.protocol = 1;
  EXPECT_FALSE(WritePickle(I(1), p1).ok());
  PickleValue deep = L({});
  for (int i = 0; i < 250; ++i) deep = L({deep});
  EXPECT_THAT(WritePickle(deep).status().message(), HasSubstr("nest deeper than 200"));
  const PickleValue wide = PickleValue::IntFromLittleEndian(std::string(300, '\x01'));
  EXPECT_THAT(WritePickle(wide).status().message(), HasSubstr("wider than 255 bytes"));
}

// With FRAGSCOPE_PICKLE_WRITER_OUT=DIR, writes NAME.pN.pickle and NAME.repr.txt (DebugString) for
// tests/data/pickle/verify_writer.py, which checks that python3's pickle.load agrees.
TEST(PickleWriterTest, WritesFilesForPythonVerification) {
  const char* dir = std::getenv("FRAGSCOPE_PICKLE_WRITER_OUT");
  if (dir == nullptr) GTEST_SKIP() << "set FRAGSCOPE_PICKLE_WRITER_OUT to write the files";
  for (const std::string name : {"snapshot", "scalars", "bytes", "batches", "large"}) {
    const PickleValue value = FixtureValue(name + ".p4.pickle");
    for (const int protocol : {2, 3, 4, 5}) {
      if (protocol == 2 && name == "bytes") continue;
      PickleWriteOptions options;
      options.protocol = protocol;
      const std::string base = std::string(dir) + "/" + name;
      ASSERT_TRUE(
          WritePickleFile(value, absl::StrCat(base, ".p", protocol, ".pickle"), options).ok());
    }
    std::ofstream(std::string(dir) + "/" + name + ".repr.txt", std::ios::binary)
        << DebugString(value, 1000);
  }
}

}  // namespace
}  // namespace fragscope::pickle
