// Tests of the pickle reader (analysis/sources/pickle/pickle_reader.h) and the value tree.
#include "analysis/sources/pickle/pickle_reader.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/sources/pickle/pickle_opcodes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/pickle_test_util.h"

namespace fragscope::pickle {
namespace {

using ::fragscope::testing::Bytes;
using ::fragscope::testing::DataPath;
using ::fragscope::testing::ReadFileOrDie;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) { return ReadFileOrDie(DataPath("pickle/" + name)); }

// DebugString of the decoded pickle, or the error text.
std::string Decode(const std::string& bytes, const PickleReadOptions& options = {}) {
  absl::StatusOr<PickleValue> v = ReadPickle(bytes, options);
  return v.ok() ? DebugString(*v) : std::string("error: ") + std::string(v.status().message());
}

// A protocol 2 pickle with `body` between PROTO and STOP.
std::string P2(const std::string& body) { return Bytes({0x80, 2}) + body + "."; }

TEST(PickleReaderTest, DecodesPythonFixturesOfEveryProtocol) {
  for (const std::string name : {"snapshot", "scalars"}) {
    const std::string expected = Fixture(name + ".repr.txt");
    for (const int protocol : {2, 3, 4, 5}) {
      SCOPED_TRACE(absl::StrCat(name, " protocol ", protocol));
      EXPECT_EQ(Decode(Fixture(absl::StrCat(name, ".p", protocol, ".pickle"))), expected);
    }
  }
  for (const int protocol : {3, 4, 5}) {
    EXPECT_EQ(Decode(Fixture(absl::StrCat("bytes.p", protocol, ".pickle"))),
              Fixture("bytes.repr.txt"));
  }
}

TEST(PickleReaderTest, DecodesLibTorchJitPicklerOutput) {
  // torch::cuda::_memory_snapshot_pickled: BINUNICODE + BINPUT/BINGET strings, 8-byte LONG1.
  EXPECT_EQ(Decode(Fixture("snapshot_jit.p2.pickle")), Fixture("snapshot.repr.txt"));
}

TEST(PickleReaderTest, DecodesExactScalarValues) {
  absl::StatusOr<PickleValue> v = ReadPickle(Fixture("scalars.p4.pickle"));
  ASSERT_TRUE(v.ok()) << v.status();
  const PickleValue::Items& ints = v->Find("ints")->items();
  EXPECT_EQ(ints[14].int_value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ints[15].int_value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ints[16].kind(), PickleKind::kBigInt);  // 2**63
  EXPECT_EQ(DebugString(ints[16]), "9223372036854775808");
  EXPECT_EQ(DebugString(ints[19]), "-1267650600228229401496703205376");
  const PickleValue::Items& floats = v->Find("floats")->items();
  EXPECT_TRUE(std::signbit(floats[1].float_value()));  // -0.0 kept
  EXPECT_EQ(floats[10].float_value(), 5e-324);
  EXPECT_EQ(v->Find("strs")->items()[5].string_value(), "\xc2\xb5s\xe2\x86\x92");  // µs→
}

TEST(PickleReaderTest, DecodesBatchesLongerThanOneThousand) {
  for (const std::string file : {"batches.p2.pickle", "batches.p4.pickle"}) {
    absl::StatusOr<PickleValue> v = ReadPickle(Fixture(file));
    ASSERT_TRUE(v.ok()) << v.status();
    const auto& list = v->Find("list")->items();
    ASSERT_EQ(list.size(), 1500u);
    for (size_t i = 0; i < list.size(); ++i) ASSERT_EQ(list[i].int_value(), int64_t(i));
    const auto& dict = v->Find("dict")->entries();
    ASSERT_EQ(dict.size(), 1001u);
    EXPECT_EQ(dict[1000].first.string_value(), "k1000");
    EXPECT_EQ(dict[1000].second.int_value(), 1000);
  }
}

TEST(PickleReaderTest, DecodesInputSpanningSeveralFrames) {
  const std::string data = Fixture("large.p4.pickle");
  ASSERT_GT(data.size(), 65536u);
  absl::StatusOr<PickleValue> v = ReadPickle(data);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->items().size(), 700u);
  EXPECT_EQ(v->items()[699].string_value(), absl::StrCat("0699", std::string(96, 'z')));
}

TEST(PickleReaderTest, KeepsSharedSubtreesShared) {
  absl::StatusOr<PickleValue> v = ReadPickle(Fixture("snapshot.p4.pickle"));
  ASSERT_TRUE(v.ok());
  const PickleValue& seg = v->Find("segments")->items()[0];
  EXPECT_EQ(seg.Find("frames")->identity(),
            seg.Find("blocks")->items()[0].Find("frames")->identity());
}

// One hand-made pickle per supported opcode, with the value it must decode to.
TEST(PickleReaderTest, DecodesEveryOpcode) {
  struct Case {
    std::string pickle;
    std::string expected;
  };
  const std::string k6 = Bytes({6, 0, 0, 0, 0, 0, 0, 0});  // FRAME length
  const std::vector<Case> cases = {
      {P2("N"), "None"},
      {P2(Bytes({0x88})), "True"},
      {P2(Bytes({0x89})), "False"},
      {P2(Bytes({'K', 200})), "200"},
      {P2(Bytes({'M', 0x34, 0x12})), "4660"},
      {P2(Bytes({'J', 0xfe, 0xff, 0xff, 0xff})), "-2"},
      {P2(Bytes({0x8a, 0})), "0"},
      {P2(Bytes({0x8a, 1, 0xff})), "-1"},
      {P2(Bytes({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0})), "9223372036854775808"},
      {P2(Bytes({'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0})), "1.5"},
      {P2(Bytes({0x8c, 2}) + "hi"), "'hi'"},
      {P2(Bytes({'X', 2, 0, 0, 0, 'h', 'i'})), "'hi'"},
      {P2(Bytes({0x8d, 2, 0, 0, 0, 0, 0, 0, 0}) + "hi"), "'hi'"},
      {P2(Bytes({'C', 1, 0xff})), "b'\\xff'"},
      {P2(Bytes({'B', 1, 0, 0, 0, 'a'})), "b'a'"},
      {P2(Bytes({0x8e, 1, 0, 0, 0, 0, 0, 0, 0, 'a'})), "b'a'"},
      {P2("]"), "[]"},
      {P2("}"), "{}"},
      {P2(")"), "()"},
      {P2(Bytes({'K', 1, 0x85})), "(1,)"},
      {P2(Bytes({'K', 1, 'K', 2, 0x86})), "(1, 2)"},
      {P2(Bytes({'K', 1, 'K', 2, 'K', 3, 0x87})), "(1, 2, 3)"},
      {P2(Bytes({']', 'K', 7, 'a'})), "[7]"},
      {P2(Bytes({']', '(', 'K', 1, 'K', 2, 'e'})), "[1, 2]"},
      {P2(Bytes({'}', 0x8c, 1, 'k', 'N', 's'})), "{'k': None}"},
      {P2(Bytes({'}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'b', 'K', 2, 'u'})), "{'a': 1, 'b': 2}"},
      {P2(Bytes({']', 'q', 0, 'h', 0, 0x86})), "([], [])"},
      {P2(Bytes({']', 'r', 0, 0, 0, 0, 'j', 0, 0, 0, 0, 0x86})), "([], [])"},
      {absl::StrCat(Bytes({0x80, 4, 0x95}), k6, Bytes({']', 0x94, 'h', 0, 0x86, '.'})), "([], [])"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    EXPECT_EQ(Decode(cases[i].pickle), cases[i].expected);
  }
  // MARK + TUPLE.
  EXPECT_EQ(Decode(P2(Bytes({'(', 'K', 1, 'K', 2, 'K', 3, 'K', 4, 't'}))), "(1, 2, 3, 4)");
  // A memo reference sees later mutation, as in Python: l = []; (l, l.append(5)).
  EXPECT_EQ(Decode(P2(Bytes({']', 'q', 0, 'h', 0, 'K', 5, 'a', 0x86}))), "([5], [5])");
}

TEST(PickleReaderTest, RejectsUnsupportedOpcodesNamingThemAndTheirOffset) {
  EXPECT_THAT(Decode(Fixture("bad_bytes_global.p2.pickle")),
              HasSubstr("unsupported opcode GLOBAL (0x63) at offset 2"));
  EXPECT_THAT(Decode(Fixture("bad_set.p4.pickle")), HasSubstr("EMPTY_SET"));
  EXPECT_THAT(Decode(Fixture("bad_object.p4.pickle")), HasSubstr("STACK_GLOBAL"));
  EXPECT_THAT(Decode(Fixture("bad_protocol0.pickle")), HasSubstr("must start with PROTO"));
  EXPECT_THAT(Decode(Fixture("bad_cyclic.p4.pickle")), HasSubstr("contains itself"));
  EXPECT_THAT(Decode(P2("N0")), HasSubstr("unsupported opcode POP (0x30) at offset 3"));
  EXPECT_THAT(Decode(P2("N2")), HasSubstr("DUP"));
  EXPECT_THAT(Decode(P2(Bytes({0x8b, 0, 0, 0, 0}))), HasSubstr("LONG4"));
  EXPECT_THAT(Decode(P2(Bytes({0xfe}))),
              HasSubstr("unsupported opcode unknown (0xfe) at offset 2"));
}

// pickle.dumps(..., protocol=5, buffer_callback=...) leaves NEXT_BUFFER / READONLY_BUFFER where
// the buffer was: refused with what it is, not as an unknown opcode.
TEST(PickleReaderTest, RefusesOutOfBandBuffersSayingWhy) {
  const std::string error = Decode(Fixture("bad_out_of_band.p5.pickle"));
  EXPECT_THAT(error, HasSubstr("out-of-band buffer (opcode NEXT_BUFFER 0x97 at offset 31)"));
  EXPECT_THAT(error, HasSubstr("its buffers are not in the file"));
  EXPECT_THAT(Decode(Bytes({0x80, 5, 0x98, '.'})), HasSubstr("READONLY_BUFFER 0x98 at offset 2"));
}

TEST(PickleReaderTest, ValidatesProtocolAndFrames) {
  EXPECT_THAT(Decode(Bytes({0x80, 1, 'N', '.'})), HasSubstr("unsupported protocol 1"));
  EXPECT_THAT(Decode(Bytes({0x80, 6, 'N', '.'})), HasSubstr("unsupported protocol 6"));
  EXPECT_THAT(Decode(P2(Bytes({0x80, 2}) + "N")), HasSubstr("PROTO after the start"));
  EXPECT_THAT(Decode(P2(Bytes({0x95, 0, 0, 0, 0, 0, 0, 0, 0}) + "N")),
              HasSubstr("FRAME in a protocol 2/3 pickle"));
  EXPECT_THAT(Decode(Bytes({0x80, 4, 0x95, 0xff, 0, 0, 0, 0, 0, 0, 0, 'N', '.'})),
              HasSubstr("truncated: frame of 255 bytes, 2 remain"));
  EXPECT_THAT(Decode(""), HasSubstr("truncated"));
}

TEST(PickleReaderTest, ChecksLengthsAgainstTheRemainingInputBeforeAllocating) {
  // Lengths of 2^60 and 4 GiB with a handful of bytes behind them.
  EXPECT_THAT(Decode(P2(Bytes({0x8d, 0, 0, 0, 0, 0, 0, 0, 0x10}) + "ab")),
              HasSubstr("truncated: operand needs 1152921504606846976 bytes"));
  EXPECT_THAT(Decode(P2(Bytes({'B', 0xff, 0xff, 0xff, 0xff, 'a', 'b'}))), HasSubstr("truncated"));
  EXPECT_THAT(Decode(P2(Bytes({0x8a, 0xff, 1, 2}))), HasSubstr("truncated"));
  PickleReadOptions small;
  small.max_input_bytes = 3;
  EXPECT_EQ(ReadPickle(P2("N"), small).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PickleReaderTest, RejectsTruncationAtEveryByte) {
  for (const std::string file : {"snapshot.p2.pickle", "snapshot.p4.pickle", "scalars.p4.pickle",
                                 "snapshot_jit.p2.pickle", "bytes.p5.pickle"}) {
    const std::string data = Fixture(file);
    for (size_t n = 0; n < data.size(); ++n) {
      absl::StatusOr<PickleValue> v = ReadPickle(std::string_view(data).substr(0, n));
      ASSERT_FALSE(v.ok()) << file << " cut at " << n;
      ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    }
  }
}

TEST(PickleReaderTest, SurvivesEveryByteReplaced) {
  const std::string data = Fixture("snapshot.p4.pickle");
  for (size_t i = 0; i < data.size(); ++i) {
    for (const int b : {0x00, 0x7f, 0x80, 0xff, int{'h'}, int{'e'}, int{'u'}, int{'('}}) {
      std::string copy = data;
      copy[i] = static_cast<char>(b);
      (void)ReadPickle(copy);  // any result but a crash, hang or huge allocation
    }
  }
}

TEST(PickleReaderTest, ChecksMemoReferences) {
  EXPECT_THAT(Decode(P2(Bytes({'N', 'h', 3}))),
              HasSubstr("memo index 3 was never stored (memo has 0"));
  EXPECT_THAT(Decode(P2(Bytes({'N', 'j', 0x40, 0x42, 0x0f, 0}))), HasSubstr("never stored"));
  EXPECT_THAT(Decode(P2(Bytes({'N', 'r', 0x40, 0x42, 0x0f, 0}))),
              HasSubstr("memo index 1000000 skips ahead"));
  EXPECT_THAT(Decode(P2(Bytes({'q', 0, 'N'}))), HasSubstr("stack underflow"));
  EXPECT_THAT(Decode(Bytes({0x80, 4, 0x94, 'N', '.'})), HasSubstr("stack underflow"));
  // Overwriting an existing memo slot is allowed (Python allows it).
  EXPECT_EQ(Decode(P2(Bytes({'(', 'N', 'q', 0, 'K', 1, 'q', 0, 'h', 0, 't'}))), "(None, 1, 1)");
}

TEST(PickleReaderTest, ChecksTheStackAndMarks) {
  EXPECT_THAT(Decode(P2("]a")), HasSubstr("stack underflow: needs 2 values"));
  EXPECT_THAT(Decode(P2("](Na")), HasSubstr("stack underflow"));  // the list is below the MARK
  EXPECT_THAT(Decode(P2("Nt")), HasSubstr("no MARK to pop"));
  EXPECT_THAT(Decode(P2("(Ne")), HasSubstr("no container below the MARK"));
  EXPECT_THAT(Decode(P2("}(Nu")), HasSubstr("odd number of items"));
  EXPECT_THAT(Decode(P2(")Na")), HasSubstr("target is a tuple, not a list"));
  EXPECT_THAT(Decode(P2("]NNs")), HasSubstr("target is a list, not a dict"));
  EXPECT_THAT(Decode(P2("NN")), HasSubstr("STOP with 2 values"));
  EXPECT_THAT(Decode(P2("(N")), HasSubstr("1 open MARKs"));
  EXPECT_THAT(Decode(P2(Bytes({0x85}))), HasSubstr("stack underflow"));
  EXPECT_THAT(Decode(P2("N") + "xyz"), HasSubstr("3 bytes follow STOP"));
  PickleReadOptions trailing;
  trailing.allow_trailing_bytes = true;
  EXPECT_EQ(Decode(P2("N") + "xyz", trailing), "None");
  PickleReadOptions tiny_stack;
  tiny_stack.max_stack = 4;
  EXPECT_THAT(Decode(P2("NNNNN"), tiny_stack), HasSubstr("stack deeper than 4"));
  EXPECT_THAT(Decode(P2("(((((N"), tiny_stack), HasSubstr("more than 4 open MARKs"));
}

TEST(PickleReaderTest, ResolvesDuplicateDictKeysAsPython) {
  // {'a': 1, 'b': 2, 'a': 3} -> {'a': 3, 'b': 2}; True == 1 == 1.0 are one key.
  EXPECT_EQ(Decode(P2(Bytes({'}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'b', 'K', 2, 0x8c, 1, 'a',
                             'K', 3, 'u'}))),
            "{'a': 3, 'b': 2}");
  EXPECT_EQ(Decode(P2(Bytes(
                {'}', '(', 'K', 1, 'N', 0x88, 0x88, 'G', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 'N', 'u'}))),
            "{1: None}");
  // A large dict takes the hashed path.
  std::string body = "}(";
  for (int i = 0; i < 40; ++i) body += Bytes({'K', i % 20, 'K', i});
  absl::StatusOr<PickleValue> v = ReadPickle(P2(body + "u"));
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->entries().size(), 20u);
  EXPECT_EQ(v->entries()[5].second.int_value(), 25);
}

TEST(PickleReaderTest, RejectsUnhashableAndTupleKeys) {
  EXPECT_THAT(Decode(P2("}]Ns")), HasSubstr("unhashable dict key of type list"));
  EXPECT_THAT(Decode(P2("}(}Nu")), HasSubstr("unhashable dict key of type dict"));
  EXPECT_THAT(Decode(P2("})Ns")), HasSubstr("tuple dict keys are not supported"));
}

// N nested lists: EMPTY_LIST x N then APPEND x (N - 1).
std::string NestedLists(size_t n) { return P2(std::string(n, ']') + std::string(n - 1, 'a')); }

TEST(PickleReaderTest, BoundsNestingDepth) {
  PickleReadOptions options;
  EXPECT_TRUE(ReadPickle(NestedLists(options.max_depth), options).ok());
  EXPECT_EQ(ReadPickle(NestedLists(options.max_depth + 1), options).status().code(),
            absl::StatusCode::kResourceExhausted);
  // TUPLE1 chains nest without growing the stack.
  const std::string chain = P2(absl::StrCat("N", std::string(100000, static_cast<char>(0x85))));
  EXPECT_THAT(Decode(chain), HasSubstr("containers nest deeper than 200"));
}

TEST(PickleReaderTest, BoundsDepthAlongEveryPathOfASharedSubtree) {
  // A = 150 nested lists, memoized; root = [A, [[...60 deep...[A]]]]: A is first met at depth 1
  // (fine) and then at depth 61, where it would nest 211 deep.
  std::string body = "]";  // root
  // A, memoized in slot 0.
  absl::StrAppend(&body, std::string(150, ']'), std::string(149, 'a'), Bytes({'q', 0}));
  body += "a";  // root = [A]
  // The wrapper chain around A fetched from the memo.
  absl::StrAppend(&body, std::string(60, ']'), Bytes({'h', 0}), std::string(60, 'a'));
  body += "a";  // root.append(it)
  EXPECT_THAT(Decode(P2(body)), HasSubstr("nest deeper than 200"));
}

TEST(PickleReaderTest, DecodesExponentiallySharedGraphsInLinearTime) {
  // L0 = [], L(i+1) = [Li, Li]: 2^60 leaves when expanded, 61 lists when shared. The root is the
  // tuple (L0, ..., L60).
  std::string body = Bytes({'(', ']', 'q', 0});
  for (int i = 0; i < 60; ++i) {
    body += Bytes({']', '(', 'h', i, 'h', i, 'e', 'q', i + 1});
  }
  absl::StatusOr<PickleValue> v = ReadPickle(P2(body + "t"));
  ASSERT_TRUE(v.ok()) << v.status();
  const PickleValue& l60 = v->items()[60];
  EXPECT_EQ(l60.items()[0].identity(), l60.items()[1].identity());
  EXPECT_EQ(l60.items()[0].identity(), v->items()[59].identity());
}

}  // namespace
}  // namespace fragscope::pickle
