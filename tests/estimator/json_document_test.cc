// JsonNumber's rounding and integer rule, and DumpJson's layout and escaping, which every JSON
// output of fragscope shares.
#include "estimator/json_document.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace fragscope::estimator {
namespace {

std::string Dumped(double value, int digits) { return JsonNumber(value, digits).dump(); }

TEST(JsonNumberTest, RoundsToSignificantDigits) {
  EXPECT_EQ(Dumped(0.296875, 6), "0.296875");
  EXPECT_EQ(Dumped(2.0 / 3.0, 6), "0.666667");
  EXPECT_EQ(Dumped(2.0 / 3.0, 10), "0.6666666667");
  EXPECT_EQ(Dumped(1.5e-5, 6), "1.5e-05");
  EXPECT_EQ(Dumped(0.00015, 6), "0.00015");
}

TEST(JsonNumberTest, WholeNumbersAreExactIntegers) {
  EXPECT_EQ(Dumped(0.0, 6), "0");
  EXPECT_EQ(Dumped(-0.0, 6), "0");
  EXPECT_EQ(Dumped(3.0, 6), "3");
  // Not cut to six digits: a whole number is written exactly.
  EXPECT_EQ(Dumped(83414810624.0, 6), "83414810624");
  // Rounding that makes a number whole gives an integer too.
  EXPECT_EQ(Dumped(1234567.5, 6), "1234570");
  // Beyond 2^53 doubles are not exact integers: six digits, as a double.
  EXPECT_EQ(Dumped(1.234e18, 6), "1.234e+18");
}

TEST(JsonNumberTest, NonFiniteIsNull) {
  EXPECT_TRUE(JsonNumber(std::nan(""), 6).is_null());
  EXPECT_TRUE(JsonNumber(std::numeric_limits<double>::infinity(), 6).is_null());
  EXPECT_TRUE(JsonNumber(-std::numeric_limits<double>::infinity(), 10).is_null());
}

TEST(JsonOrNullTest, ValueOrNull) {
  EXPECT_EQ(JsonOrNull(std::optional<int>(7)).dump(), "7");
  EXPECT_TRUE(JsonOrNull(std::optional<int>()).is_null());
}

TEST(DumpJsonTest, IndentedKeysInOrderWithNewline) {
  OrderedJson j;
  j["z"] = 1;
  j["a"] = OrderedJson::array();
  j["m"] = {{"k", "v"}};
  EXPECT_EQ(DumpJson(j), "{\n  \"z\": 1,\n  \"a\": [],\n  \"m\": {\n    \"k\": \"v\"\n  }\n}\n");
  EXPECT_EQ(DumpJson(j, -1), "{\"z\":1,\"a\":[],\"m\":{\"k\":\"v\"}}");
}

TEST(DumpJsonTest, EscapesAndReplacesInvalidUtf8) {
  OrderedJson j = std::string("a\"b\\c\n\x01 \xc3\xa9 \xff");
  EXPECT_EQ(DumpJson(j, -1), "\"a\\\"b\\\\c\\n\\u0001 \xc3\xa9 \xef\xbf\xbd\"");
}

}  // namespace
}  // namespace fragscope::estimator
