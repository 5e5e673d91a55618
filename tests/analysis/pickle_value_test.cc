// Tests of PickleValue (analysis/sources/pickle/pickle_value.h): repr, big ints, and PickleRef
// paths.
#include "analysis/sources/pickle/pickle_value.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/pickle_test_util.h"

namespace fragscope::pickle {
namespace {

using ::fragscope::testing::Bytes;
using ::fragscope::testing::D;
using ::fragscope::testing::I;
using ::fragscope::testing::L;
using ::fragscope::testing::S;
using ::fragscope::testing::T;

TEST(PickleValueTest, PrintsFloatsAsPythonRepr) {
  const std::vector<std::pair<double, std::string>> cases = {
      {1.0, "1.0"},          {0.1, "0.1"},    {1e16, "1e+16"},       {1e15, "1000000000000000.0"},
      {1e-4, "0.0001"},      {1e-5, "1e-05"}, {-2.5e-7, "-2.5e-07"}, {123.456, "123.456"},
      {1.5e300, "1.5e+300"}, {-0.0, "-0.0"},  {NAN, "nan"},          {-INFINITY, "-inf"}};
  for (const auto& [value, text] : cases) EXPECT_EQ(DebugString(PickleValue::Float(value)), text);
}

TEST(PickleValueTest, KeepsBigIntegersExact) {
  const PickleValue fits = PickleValue::IntFromLittleEndian(Bytes({0xff, 0xff, 0xff}));
  EXPECT_EQ(fits.kind(), PickleKind::kInt);
  EXPECT_EQ(fits.int_value(), -1);
  // Nine bytes that sign-extend an int64 still fit.
  const PickleValue min =
      PickleValue::IntFromLittleEndian(Bytes({0, 0, 0, 0, 0, 0, 0, 0x80, 0xff}));
  EXPECT_EQ(min.kind(), PickleKind::kInt);
  EXPECT_EQ(min.int_value(), std::numeric_limits<int64_t>::min());
  const PickleValue big = PickleValue::IntFromLittleEndian(Bytes({0, 0, 0, 0, 0, 0, 0, 0x80, 0}));
  EXPECT_EQ(big.kind(), PickleKind::kBigInt);
  EXPECT_EQ(DebugString(big), "9223372036854775808");
  EXPECT_EQ(big.string_value().size(), 9u);  // the bytes are kept as read
}

TEST(PickleValueTest, PrintsContainersAndStringsAsPythonRepr) {
  const PickleValue v = D({{"t", T({I(1)})},
                           {"e", T({})},
                           {"l", L({S("it's"), PickleValue::Bytes("\n\x01"), PickleValue()})},
                           {"b", PickleValue::Bool(false)}});
  EXPECT_EQ(DebugString(v), "{'t': (1,), 'e': (), 'l': [\"it's\", b'\\n\\x01', None], 'b': False}");
  EXPECT_EQ(DebugString(L({L({L({})})}), 1), "[...]");
}

TEST(PickleValueTest, ComparesStructurallyAndFloatsByBits) {
  EXPECT_EQ(L({I(1), S("a")}), L({I(1), S("a")}));
  EXPECT_NE(L({I(1)}), T({I(1)}));
  EXPECT_NE(I(1), PickleValue::Bool(true));
  EXPECT_EQ(PickleValue::Float(NAN), PickleValue::Float(NAN));
  EXPECT_NE(PickleValue::Float(0.0), PickleValue::Float(-0.0));
}

// The snapshot shape the path errors are about.
PickleValue Snapshot() {
  return D(
      {{"segments", L({D({{"blocks", L({D({{"size", I(512)}})})}}),
                       D({{"blocks", L({D({{"size", S("big")}}), D({{"size", I(-4)}})})}})})}});
}

TEST(PickleRefTest, NamesThePathInTypeErrors) {
  const PickleValue root = Snapshot();
  const PickleRef r(root);
  auto segments = r.Field("segments");
  ASSERT_TRUE(segments.ok());
  auto seg = segments->Element(1);
  ASSERT_TRUE(seg.ok());
  auto blocks = seg->Field("blocks");
  ASSERT_TRUE(blocks.ok());
  auto block = blocks->Element(0);
  ASSERT_TRUE(block.ok());
  auto size = block->Field("size");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->Path(), "segments[1].blocks[0].size");
  EXPECT_EQ(size->Int().status().message(), "segments[1].blocks[0].size: expected int, got str");
  auto block1 = blocks->Element(1);
  ASSERT_TRUE(block1.ok());
  auto negative = block1->Field("size");
  ASSERT_TRUE(negative.ok());
  EXPECT_EQ(negative->UInt().status().message(),
            "segments[1].blocks[1].size: expected an int >= 0, got -4");
  EXPECT_EQ(negative->Int().value(), -4);
  EXPECT_EQ(block->Field("address").status().message(),
            "segments[1].blocks[0]: missing key 'address'");
  EXPECT_EQ(blocks->Element(2).status().message(),
            "segments[1].blocks: index 2 out of range (length 2)");
  EXPECT_EQ(r.Element(0).status().message(), "<root>: expected list, got dict");
  EXPECT_EQ(size->Field("x").status().message(),
            "segments[1].blocks[0].size: expected dict, got str");
  auto optional = block->OptionalField("address");
  ASSERT_TRUE(optional.ok());
  EXPECT_FALSE(optional->has_value());
}

TEST(PickleRefTest, ConvertsScalars) {
  const PickleValue root =
      D({{"f", PickleValue::Float(0.5)},
         {"i", I(3)},
         {"b", PickleValue::Bool(true)},
         {"s", S("x")},
         {"big", PickleValue::IntFromLittleEndian(Bytes({0, 0, 0, 0, 0, 0, 0, 0, 1}))}});
  const PickleRef r(root);
  EXPECT_EQ(r.Field("f")->Float().value(), 0.5);
  EXPECT_EQ(r.Field("i")->Float().value(), 3.0);  // an int where a float is expected is fine
  EXPECT_EQ(r.Field("b")->Bool().value(), true);
  EXPECT_EQ(r.Field("s")->Str().value(), "x");
  EXPECT_EQ(r.Field("i")->Bool().status().message(), "i: expected bool, got int");
  const absl::Status big = r.Field("big")->Int().status();
  EXPECT_EQ(big.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(big.message(), "big: int 18446744073709551616 does not fit in int64");
}

TEST(PickleValueTest, FindsStrKeysOnly) {
  const PickleValue d = PickleValue::Dict({{I(1), S("int key")}, {S("1"), S("str key")}});
  ASSERT_NE(d.Find("1"), nullptr);
  EXPECT_EQ(d.Find("1")->string_value(), "str key");
  EXPECT_EQ(d.Find("2"), nullptr);
  EXPECT_EQ(S("not a dict").Find("x"), nullptr);
}

}  // namespace
}  // namespace fragscope::pickle
