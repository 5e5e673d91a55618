// Pickle opcode bytes, shared by the reader, the writer and the tests.
//
// The values are those of CPython's Lib/pickle.py. Only the opcodes that Python and LibTorch's
// jit Pickler emit for None/bool/int/float/str/bytes/list/tuple/dict in protocols 2-5 are decoded
// (see README.md); the others are listed so that an error can name what it rejected.
#pragma once

#include <cstdint>
#include <string_view>

namespace fragscope::pickle {

namespace op {
// Supported.
inline constexpr uint8_t kMark = '(';
inline constexpr uint8_t kStop = '.';
inline constexpr uint8_t kBinInt = 'J';
inline constexpr uint8_t kBinInt1 = 'K';
inline constexpr uint8_t kBinInt2 = 'M';
inline constexpr uint8_t kNone = 'N';
inline constexpr uint8_t kBinUnicode = 'X';
inline constexpr uint8_t kAppend = 'a';
inline constexpr uint8_t kEmptyDict = '}';
inline constexpr uint8_t kAppends = 'e';
inline constexpr uint8_t kBinGet = 'h';
inline constexpr uint8_t kLongBinGet = 'j';
inline constexpr uint8_t kEmptyList = ']';
inline constexpr uint8_t kBinPut = 'q';
inline constexpr uint8_t kLongBinPut = 'r';
inline constexpr uint8_t kSetItem = 's';
inline constexpr uint8_t kTuple = 't';
inline constexpr uint8_t kEmptyTuple = ')';
inline constexpr uint8_t kSetItems = 'u';
inline constexpr uint8_t kBinFloat = 'G';
inline constexpr uint8_t kProto = 0x80;
inline constexpr uint8_t kTuple1 = 0x85;
inline constexpr uint8_t kTuple2 = 0x86;
inline constexpr uint8_t kTuple3 = 0x87;
inline constexpr uint8_t kNewTrue = 0x88;
inline constexpr uint8_t kNewFalse = 0x89;
inline constexpr uint8_t kLong1 = 0x8a;
inline constexpr uint8_t kBinBytes = 'B';
inline constexpr uint8_t kShortBinBytes = 'C';
inline constexpr uint8_t kShortBinUnicode = 0x8c;
inline constexpr uint8_t kBinUnicode8 = 0x8d;
inline constexpr uint8_t kBinBytes8 = 0x8e;
inline constexpr uint8_t kMemoize = 0x94;
inline constexpr uint8_t kFrame = 0x95;
// Rejected (named in errors only).
inline constexpr uint8_t kGlobal = 'c';
inline constexpr uint8_t kStackGlobal = 0x93;
inline constexpr uint8_t kReduce = 'R';
inline constexpr uint8_t kNextBuffer = 0x97;      // protocol 5 out-of-band buffer
inline constexpr uint8_t kReadonlyBuffer = 0x98;  // protocol 5 out-of-band buffer
}  // namespace op

// The opcode's name as in pickle.py ("BINUNICODE"), or "unknown" for bytes that are no opcode.
std::string_view OpcodeName(uint8_t opcode);

}  // namespace fragscope::pickle
