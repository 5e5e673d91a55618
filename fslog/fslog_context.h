// Who holds the memory (format 2.6): `string` records intern a text once per log, `context`
// records define a context (role, module path, ATen op, code location, backward) once per log
// from those strings, an alloc record names its context by id (word 6), and a tag record may give
// a live block a new context (word 2). Encoders and decoders of their bytes; fslog_format.h has
// the record header they share; FORMAT.md, "Context records", the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fslog/fslog_format.h"

namespace fragscope {

// Note [Context records] (format 2.6)
// Ids are chosen by the writer, 1..2^32-1 (0 = none), each defined once per log before any record
// uses it; a reader refuses a log whose records use an id no earlier record defines, or define an
// id twice (naming the record). The text is data: any bytes, at most kMaxStringTextBytes.
inline constexpr uint8_t kRecordKindString = 16;
inline constexpr uint8_t kRecordKindContext = 17;
// The context of the request the `oom` record right after it refused (an oom record's words are
// all in use): word 0 the context id. Written only just before an oom record, in the same chunk.
inline constexpr uint8_t kRecordKindOomContext = 18;

inline bool IsContextRecord(uint8_t kind) {
  return kind == kRecordKindString || kind == kRecordKindContext || kind == kRecordKindOomContext;
}

// A string's text: the first record carries 48 bytes at offset 32 (words 0 and 1 are its id and
// total bytes), continuation records (kRecordFlagContinuation) 64 bytes at offset 16, all in one
// chunk; a longer text is truncated at a UTF-8 boundary (kRecordFlagTruncated).
inline constexpr size_t kMaxStringTextBytes = 4096;
inline constexpr size_t kStringFirstTextOffset = 32;
inline constexpr size_t kStringFirstRecordTextBytes = 48;
inline constexpr size_t kMaxStringRecords =
    1 + (kMaxStringTextBytes - kStringFirstRecordTextBytes + kOptionsContinuationTextBytes - 1) /
            kOptionsContinuationTextBytes;
static_assert(kStringFirstTextOffset + kStringFirstRecordTextBytes == kRecordBytes);
static_assert(kMaxStringRecords == 65 && kMaxStringRecords < kMaxChunkRecords,
              "a whole string fits in one chunk");

// Word indices. String (first record): id, total text bytes. Context: id, then the string ids of
// its module path, op and code location (role in `aux`, kRecordFlagBackward in `flags`). Alloc:
// the context id in the word earlier minors leave 0. Tag: the new context id (0: keep it).
inline constexpr int kWordStringId = 0;
inline constexpr int kWordStringBytes = 1;
inline constexpr int kWordContextId = 0;
inline constexpr int kWordContextModule = 1;
inline constexpr int kWordContextOp = 2;
inline constexpr int kWordContextSite = 3;
inline constexpr int kWordAllocContext = 6;  // kWordResultBytes, 0 in alloc records before 2.6
inline constexpr int kWordTagContext = 2;
// A context record's flag: its allocations are made in a backward pass.
inline constexpr uint8_t kRecordFlagBackward = 1 << 0;

// A context as its record defines it. `role` is the raw byte (fslog/allocation_role.h).
struct ContextDefinition {
  uint32_t id = 0;
  uint8_t role = 0;
  bool backward = false;
  uint32_t module = 0;  // string ids; 0 = none
  uint32_t op = 0;
  uint32_t site = 0;
};

// Encodes string `id` into out[0..n), n returned (1..kMaxStringRecords). REQUIRES: `out` has room
// for kMaxStringRecords records.
size_t EncodeString(uint32_t id, std::string_view text, uint64_t timestamp_ns, int32_t device,
                    LogRecord* out);

// The text bytes one string record carries, first or continuation (bounded by the record even
// if `aux` is corrupt).
std::string_view StringTextPart(const LogRecord& record);

void EncodeContext(const ContextDefinition& context, uint64_t timestamp_ns, int32_t device,
                   LogRecord* record);
void EncodeOomContext(uint32_t context, uint64_t timestamp_ns, int32_t device, LogRecord* record);
// The definition a context record carries; `wide_ids` is set when a word holds more than 32 bits
// (a damaged log: the reader refuses it).
ContextDefinition DecodeContext(const LogRecord& record, bool* wide_ids);

}  // namespace fragscope
