// Context records (format 2.6): strings over continuation records, hostile bytes kept as data,
// contexts, and the writer's thread context named in alloc records (and in no other record).
#include "fslog/fslog_context.h"

#include <string>
#include <thread>
#include <vector>

#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/fslog/fslog_writer_test_util.h"

namespace fragscope::testing {
namespace {

std::string Reassemble(const LogRecord* records, size_t n) {
  std::string text;
  for (size_t i = 0; i < n; ++i) text += StringTextPart(records[i]);
  return text;
}

TEST(FslogContextTest, AShortStringIsOneRecord) {
  LogRecord out[kMaxStringRecords];
  const size_t n = EncodeString(7, "model.layers.7.mlp.down_proj", 5, 0, out);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0].kind, kRecordKindString);
  EXPECT_EQ(out[0].words[kWordStringId], 7u);
  EXPECT_EQ(out[0].words[kWordStringBytes], 28u);
  EXPECT_EQ(out[0].flags, 0);
  EXPECT_EQ(StringTextPart(out[0]), "model.layers.7.mlp.down_proj");
}

TEST(FslogContextTest, ALongStringSpansContinuationRecords) {
  for (size_t length : {48u, 49u, 112u, 113u, 1000u, 4096u}) {
    std::string text;
    for (size_t i = 0; i < length; ++i) text += static_cast<char>('a' + i % 26);
    LogRecord out[kMaxStringRecords];
    const size_t n = EncodeString(3, text, 1, 0, out);
    EXPECT_EQ(n, length <= 48 ? 1 : 1 + (length - 48 + 63) / 64) << length;
    EXPECT_EQ(Reassemble(out, n), text) << length;
    EXPECT_EQ(out[0].flags & kRecordFlagTruncated, 0) << length;
    for (size_t i = 1; i < n; ++i) EXPECT_TRUE(out[i].flags & kRecordFlagContinuation);
  }
}

TEST(FslogContextTest, AnOverlongStringIsCutAtACharacterAndFlagged) {
  std::string text(kMaxStringTextBytes - 1, 'x');
  text += "\xc3\xa9\xc3\xa9";  // a two-byte character straddles the limit
  LogRecord out[kMaxStringRecords];
  const size_t n = EncodeString(1, text, 1, 0, out);
  EXPECT_EQ(n, kMaxStringRecords);
  EXPECT_TRUE(out[0].flags & kRecordFlagTruncated);
  EXPECT_EQ(Reassemble(out, n), std::string(kMaxStringTextBytes - 1, 'x'));
  EXPECT_EQ(out[0].words[kWordStringBytes], kMaxStringTextBytes - 1);
}

TEST(FslogContextTest, HostileBytesAreDataAndACorruptLengthStaysInTheRecord) {
  const std::string hostile("\0\xff\n%s\x1b[2J", 10);
  LogRecord out[kMaxStringRecords];
  ASSERT_EQ(EncodeString(2, hostile, 1, 0, out), 1u);
  EXPECT_EQ(StringTextPart(out[0]), hostile);
  out[0].aux = 255;
  EXPECT_EQ(StringTextPart(out[0]).size(), kStringFirstRecordTextBytes);
}

TEST(FslogContextTest, AContextRoundTripsAndWideIdsAreSeen) {
  LogRecord r;
  EncodeContext({.id = 9, .role = 5, .backward = true, .module = 1, .op = 2, .site = 3}, 4, 0, &r);
  EXPECT_EQ(r.kind, kRecordKindContext);
  bool wide = true;
  const ContextDefinition c = DecodeContext(r, &wide);
  EXPECT_FALSE(wide);
  EXPECT_EQ(c.id, 9u);
  EXPECT_EQ(c.role, 5);
  EXPECT_TRUE(c.backward);
  EXPECT_EQ(c.module, 1u);
  EXPECT_EQ(c.op, 2u);
  EXPECT_EQ(c.site, 3u);
  r.words[kWordContextOp] = uint64_t{1} << 32;
  DecodeContext(r, &wide);
  EXPECT_TRUE(wide);
  EXPECT_EQ(RecordKindName(kRecordKindString), "string");
  EXPECT_EQ(RecordKindName(kRecordKindContext), "context");
}

// The writer: definitions in order, and an alloc made while a thread context is set names it in
// word 6 (no other record does, and another thread's allocations do not).
TEST(FslogContextTest, TheWriterNamesTheThreadContextInAllocRecords) {
  const std::string path = TempLogPath("contexts");
  {
    auto writer = FslogWriter::Open(path, WriterTestInfo());
    ASSERT_TRUE(writer.ok()) << writer.status();
    (*writer)->DefineString(1, "transformer.h.0");
    (*writer)->DefineContext({.id = 1, .role = 6, .module = 1});
    FslogWriter::SetThreadContext(1);
    (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, 1));
    (*writer)->OnEvent(SampleEvent(EventKind::kFreeRequested, 1));
    std::thread other([&] { (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, 2)); });
    other.join();
    FslogWriter::SetThreadContext(0);
    (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, 3));
    (*writer)->Tag(0x1000, 2, 1);
    ASSERT_TRUE((*writer)->Flush().ok());
  }
  const ReadResult read = ReadFile(path);
  ASSERT_TRUE(read.status.ok()) << read.status;
  std::vector<LogEntry> entries;
  for (const LogEntry& e : read.entries) {
    if (e.record.kind != static_cast<uint8_t>(EventKind::kSegmentAlloc)) entries.push_back(e);
  }
  ASSERT_EQ(entries.size(), 7u);
  EXPECT_EQ(entries[0].record.kind, kRecordKindString);
  EXPECT_EQ(entries[0].text, "transformer.h.0");
  EXPECT_EQ(entries[1].record.kind, kRecordKindContext);
  EXPECT_EQ(entries[2].kind(), EventKind::kAlloc);
  EXPECT_EQ(entries[2].record.words[kWordAllocContext], 1u);
  EXPECT_EQ(entries[3].kind(), EventKind::kFreeRequested);
  EXPECT_EQ(entries[3].record.words[kWordResultBytes],  // its own, not the context
            SampleEvent(EventKind::kFreeRequested, 1).result_bytes);
  EXPECT_EQ(entries[4].record.words[kWordAllocContext], 0u);  // the other thread's
  EXPECT_EQ(entries[5].record.words[kWordAllocContext], 0u);  // after the context was unset
  EXPECT_EQ(entries[6].kind(), EventKind::kTag);
  EXPECT_EQ(entries[6].record.words[kWordTagContext], 1u);
}

}  // namespace
}  // namespace fragscope::testing
