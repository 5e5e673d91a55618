#include "fslog/fslog_reader.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "fslog/crc32c.h"
#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A small log written by the real writer: three chunks (Flush() seals each) holding events,
// a marker and a multi-record options change. Returns its bytes and each chunk's end offset.
struct SmallLog {
  std::string bytes;
  size_t header_bytes = 0;
  std::vector<size_t> chunk_ends;
  std::vector<size_t> records_before_chunk_end;  // logical entries up to each chunk end
};

SmallLog WriteSmallLog() {
  const std::string path = TempLogPath("small");
  {
    FslogHeaderInfo info;
    info.device_name = "sim";
    info.allocator_options = "expandable_segments:True";
    auto writer = FslogWriter::Open(path, info).value();
    writer->OnEvent(SampleEvent(EventKind::kSegmentAlloc, 1));
    writer->OnEvent(SampleEvent(EventKind::kAlloc, 2));
    writer->Mark("step 1");
    EXPECT_TRUE(writer->Flush().ok());
    writer->RecordOptionsChange(std::string(130, 'x'));  // three records
    EXPECT_TRUE(writer->Flush().ok());
    writer->OnEvent(SampleEvent(EventKind::kFreeCompleted, 3));
    writer->OnEvent(SampleEvent(EventKind::kOom, 4));
  }
  SmallLog log;
  log.bytes = FileBytes(path);
  auto reader = FslogReader::OpenBytes(log.bytes).value();
  log.header_bytes = reader.header().header_bytes;
  size_t entries = 0;
  for (;;) {
    auto chunk = reader.NextChunk();
    EXPECT_TRUE(chunk.ok());
    if (!chunk.ok() || chunk->empty()) break;
    // Logical entries: continuation records fold into their options change.
    for (const LogRecord& r : *chunk)
      entries +=
          (r.flags & kRecordFlagContinuation) == 0 || r.kind != uint8_t(EventKind::kOptionsChange);
    log.chunk_ends.push_back(reader.offset());
    log.records_before_chunk_end.push_back(entries);
  }
  return log;
}

TEST(FslogReaderTest, SmallLogHasThreeChunks) {
  const SmallLog log = WriteSmallLog();
  ASSERT_EQ(log.chunk_ends.size(), 3u);
  EXPECT_EQ(log.chunk_ends.back(), log.bytes.size());
  EXPECT_EQ(log.records_before_chunk_end, (std::vector<size_t>{3, 4, 6}));
}

TEST(FslogReaderTest, TruncationAtEveryByteKeepsCompleteChunksOrFailsCleanly) {
  const SmallLog log = WriteSmallLog();
  const std::string path = TempLogPath("truncated");
  for (size_t length = 0; length <= log.bytes.size(); ++length) {
    SCOPED_TRACE(absl::StrFormat("length %d", length));
    const std::string_view prefix(log.bytes.data(), length);
    WriteFileBytes(path, prefix);
    for (const ReadResult& result : {ReadFile(path), ReadBytes(prefix)}) {
      if (length < log.header_bytes) {
        ASSERT_FALSE(result.status.ok());
        EXPECT_TRUE(Contains(std::string(result.status.message()), "offset"));
        continue;
      }
      ASSERT_TRUE(result.status.ok()) << result.status;
      size_t complete_end = log.header_bytes;
      size_t complete_entries = 0;
      for (size_t c = 0; c < log.chunk_ends.size(); ++c) {
        if (log.chunk_ends[c] <= length) {
          complete_end = log.chunk_ends[c];
          complete_entries = log.records_before_chunk_end[c];
        }
      }
      EXPECT_EQ(result.entries.size(), complete_entries);
      EXPECT_EQ(result.torn_tail_bytes, length - complete_end);
      if (length == complete_end) {
        EXPECT_TRUE(result.warnings.empty());
      } else {
        ASSERT_EQ(result.warnings.size(), 1u);
        EXPECT_TRUE(Contains(result.warnings[0], "torn tail"));
        EXPECT_TRUE(Contains(result.warnings[0], absl::StrFormat("%d", length - complete_end)));
        EXPECT_TRUE(Contains(result.warnings[0], absl::StrFormat("offset %d", complete_end)));
      }
    }
  }
}

TEST(FslogReaderTest, EveryFlippedByteIsAnErrorNamingItsChunk) {
  const SmallLog log = WriteSmallLog();
  for (size_t pos = 0; pos < log.bytes.size(); ++pos) {
    SCOPED_TRACE(absl::StrFormat("byte %d", pos));
    std::string bytes = log.bytes;
    bytes[pos] = static_cast<char>(bytes[pos] ^ 0x5A);
    const ReadResult result = ReadBytes(bytes);
    ASSERT_FALSE(result.status.ok());
    const std::string message(result.status.message());
    if (pos < log.header_bytes) {
      EXPECT_TRUE(result.entries.empty());
      EXPECT_TRUE(Contains(message, "offset")) << message;
      continue;
    }
    size_t chunk_start = log.header_bytes;
    size_t entries_before = 0;
    for (size_t c = 0; c < log.chunk_ends.size() && log.chunk_ends[c] <= pos; ++c) {
      chunk_start = log.chunk_ends[c];
      entries_before = log.records_before_chunk_end[c];
    }
    EXPECT_TRUE(Contains(message, absl::StrFormat("offset %d:", chunk_start))) << message;
    EXPECT_EQ(result.entries.size(), entries_before) << "records before the damage are delivered";
  }
}

TEST(FslogReaderTest, HeaderErrors) {
  EXPECT_EQ(ReadBytes("").status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(std::string(ReadBytes("hello, world, this is text").status.message()), "bad magic"));
  FslogHeader v3 = SampleHeader();
  v3.version_major = 3;
  v3.version_minor = 0;
  EXPECT_TRUE(Contains(std::string(ReadBytes(SerializeFileHeader(v3)).status.message()),
                       "unknown format version 3.0"));
  FslogHeader v0 = SampleHeader();
  v0.version_major = 0;
  v0.version_minor = 0;
  EXPECT_TRUE(Contains(std::string(ReadBytes(SerializeFileHeader(v0)).status.message()),
                       "unknown format version 0.0 (this reader knows 1.x to 2.x)"));
  std::string wrong_record_size = SerializeFileHeader(SampleHeader());
  wrong_record_size[offsetof(FileHeader, record_bytes)] = 64;
  EXPECT_TRUE(Contains(std::string(ReadBytes(wrong_record_size).status.message()),
                       "offset 20: record size 64"));
  auto missing = FslogReader::Open("/nonexistent/x.fslog");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(FslogReaderTest, HeaderOnlyLogIsEmptyAndClean) {
  const ReadResult result = ReadBytes(SerializeFileHeader(SampleHeader()));
  ASSERT_TRUE(result.status.ok());
  EXPECT_TRUE(result.entries.empty());
  EXPECT_TRUE(result.warnings.empty());
}

// A chunk with a valid header CRC but impossible lengths.
std::string LogWithChunkHeader(uint32_t count, uint32_t payload_bytes) {
  LogBuilder builder;
  ChunkHeader chunk = {};
  chunk.magic = kChunkMagic;
  chunk.record_count = count;
  chunk.payload_bytes = payload_bytes;
  chunk.header_crc32c = Crc32c(&chunk, kChunkHeaderCrcCoveredBytes);
  builder.bytes().append(reinterpret_cast<const char*>(&chunk), sizeof(chunk));
  builder.bytes().append(1024, '\0');
  return builder.bytes();
}

TEST(FslogReaderTest, ImpossibleChunkLengthsAreErrors) {
  const size_t at = SerializeFileHeader(SampleHeader()).size();
  for (auto [count, bytes] : std::vector<std::pair<uint32_t, uint32_t>>{
           {0, 0}, {1, 79}, {1000, 80000}, {UINT32_MAX, UINT32_MAX}, {2, 80}}) {
    const ReadResult result = ReadBytes(LogWithChunkHeader(count, bytes));
    EXPECT_TRUE(Contains(std::string(result.status.message()),
                         absl::StrFormat("offset %d: impossible chunk length", at)))
        << result.status;
  }
}

TEST(FslogReaderTest, SequenceGapsAreWarningsAndBackwardsIsAnError) {
  LogBuilder builder;
  builder.AddChunk({EncodedSample(EventKind::kAlloc, 0)}, 0);
  builder.AddChunk({EncodedSample(EventKind::kAlloc, 1)}, 10);
  const size_t bad = builder.AddChunk({EncodedSample(EventKind::kAlloc, 2)}, 5);
  const ReadResult result = ReadBytes(builder.bytes());
  ASSERT_EQ(result.entries.size(), 2u);
  EXPECT_EQ(result.entries[1].sequence, 10u);
  EXPECT_EQ(result.missing_records, 9u);
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_TRUE(Contains(result.warnings[0], "9 records missing before sequence 10"));
  EXPECT_TRUE(Contains(std::string(result.status.message()),
                       absl::StrFormat("offset %d: chunk sequence 5 goes backwards", bad)));
}

// Note [Combined free records]: in a 2.x log one record is two events; events are numbered by
// record sequence plus the combined records before them, across chunks and gaps.
TEST(FslogReaderTest, CombinedFreeRecordIsTwoEventsAndShiftsTheNumbering) {
  const CombinedFreeSample free = MakeCombinedFree(7, 1'000'000'500);
  const auto build = [&](uint16_t major) {
    FslogHeader header = SampleHeader();
    header.version_major = major;
    LogBuilder builder(header);
    builder.AddChunk({EncodedSample(EventKind::kAlloc, 0), free.record}, 0);  // ends the chunk
    builder.AddChunk({EncodedSample(EventKind::kAlloc, 1)}, 2);
    builder.AddChunk({EncodedSample(EventKind::kAlloc, 2)}, 5);  // 2 records missing
    return builder.bytes();
  };
  const ReadResult v2 = ReadBytes(build(2));
  ASSERT_TRUE(v2.status.ok()) << v2.status;
  ASSERT_EQ(v2.entries.size(), 5u);
  EXPECT_TRUE(SameEvent(v2.entries[1].event(), free.requested));
  EXPECT_TRUE(SameEvent(v2.entries[2].event(), free.completed));
  EXPECT_EQ(v2.entries[1].record.timestamp_ns, 1'000'000'500u);
  EXPECT_EQ(v2.entries[2].record.timestamp_ns, 1'000'000'500u);
  std::vector<uint64_t> numbers;
  for (const LogEntry& entry : v2.entries) numbers.push_back(entry.sequence);
  EXPECT_EQ(numbers, (std::vector<uint64_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(v2.missing_records, 2u);

  // A 1.x file has no combined records: the bit means nothing there and the record is one entry.
  const ReadResult v1 = ReadBytes(build(1));
  ASSERT_TRUE(v1.status.ok()) << v1.status;
  ASSERT_EQ(v1.entries.size(), 4u);
  EXPECT_EQ(v1.entries[1].kind(), EventKind::kFreeRequested);
  EXPECT_EQ(v1.entries[1].record.flags, free.record.flags);
  EXPECT_EQ(v1.entries[3].sequence, 5u);
}

// Sequence numbers stay below kMaxSequence, so event numbers (sequence plus the combined records
// before) never wrap. Fuzzing found a chunk starting at 2^64 - 8 after a combined free: its events
// were numbered 0, 1, then 2^64 - 7 + 1 = wrapped to below the previous number.
TEST(FslogReaderTest, SequenceNumbersAboveTheFormatsBoundAreAnError) {
  const CombinedFreeSample free = MakeCombinedFree(7, 1'000'000'500);
  const auto read_with_last_chunk_at = [&](uint64_t first_sequence, size_t* bad_offset) {
    LogBuilder builder;  // SampleHeader(): this version, so the free is two events
    builder.AddChunk({free.record}, 0);
    *bad_offset = builder.AddChunk(
        {EncodedSample(EventKind::kAlloc, 1), EncodedSample(EventKind::kAlloc, 2)}, first_sequence);
    return ReadBytes(builder.bytes());
  };
  size_t at = 0;
  const ReadResult last_legal = read_with_last_chunk_at(kMaxSequence - 2, &at);
  ASSERT_TRUE(last_legal.status.ok()) << last_legal.status;
  std::vector<uint64_t> numbers;
  for (const LogEntry& entry : last_legal.entries) numbers.push_back(entry.sequence);
  EXPECT_EQ(numbers, (std::vector<uint64_t>{0, 1, kMaxSequence - 1, kMaxSequence}));

  for (const uint64_t first : {kMaxSequence - 1, kMaxSequence, UINT64_MAX - 7, UINT64_MAX}) {
    const ReadResult result = read_with_last_chunk_at(first, &at);
    EXPECT_EQ(result.entries.size(), 2u) << first;  // the first chunk's two events
    EXPECT_TRUE(Contains(
        std::string(result.status.message()),
        absl::StrFormat("offset %d: chunk sequence %d out of range (2 records", at, first)))
        << result.status;
  }
}
TEST(FslogReaderTest, WarningsAreBounded) {
  LogBuilder builder;
  for (uint64_t i = 0; i < 1000; ++i)
    builder.AddChunk({EncodedSample(EventKind::kAlloc, i)}, 2 * i);
  const ReadResult result = ReadBytes(builder.bytes());
  ASSERT_TRUE(result.status.ok());
  EXPECT_EQ(result.entries.size(), 1000u);
  EXPECT_EQ(result.missing_records, 999u);
  EXPECT_EQ(result.warnings.size(), FslogReader::kMaxWarnings + 1);
  EXPECT_TRUE(Contains(result.warnings.back(), "899 more warnings"));
}

TEST(FslogReaderTest, UnknownKindsPassThroughAndStrayContinuationsWarn) {
  LogRecord unknown = EncodedSample(EventKind::kAlloc, 1);
  unknown.kind = 200;
  LogRecord stray = {};
  stray.kind = static_cast<uint8_t>(EventKind::kOptionsChange);
  stray.flags = kRecordFlagContinuation;
  LogRecord options[kMaxOptionsChangeRecords];
  const size_t n = EncodeOptionsChange(std::string(100, 'q'), 5, 0, options);
  ASSERT_EQ(n, 2u);
  options[0].words[0] = 999;  // the stated length disagrees with the text carried
  LogBuilder builder;
  builder.AddChunk({unknown, stray, options[0], options[1]});
  const ReadResult result = ReadBytes(builder.bytes());
  ASSERT_TRUE(result.status.ok());
  ASSERT_EQ(result.entries.size(), 2u);
  EXPECT_EQ(result.entries[0].record.kind, 200);
  EXPECT_EQ(result.entries[1].text, std::string(100, 'q'));
  EXPECT_EQ(result.entries[1].sequence, 2u);
  ASSERT_EQ(result.warnings.size(), 2u);
  EXPECT_TRUE(Contains(result.warnings[0], "continuation without a start"));
  EXPECT_TRUE(Contains(result.warnings[1], "record says 999"));
}

TEST(FslogReaderTest, ChunkInterfaceYieldsRawRecordsAlignedInPlace) {
  LogBuilder builder;
  std::vector<LogRecord> records;
  for (uint64_t i = 0; i < kMaxChunkRecords; ++i)
    records.push_back(EncodedSample(EventKind::kAlloc, i));
  builder.AddChunk(records);
  builder.AddChunk({EncodedSample(EventKind::kOom, 1)});
  auto reader = FslogReader::OpenBytes(builder.bytes()).value();
  uint64_t first = 99;
  auto chunk = reader.NextChunk(&first).value();
  EXPECT_EQ(first, 0u);
  ASSERT_EQ(chunk.size(), kMaxChunkRecords);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(chunk.data()) % alignof(LogRecord), 0u);
  EXPECT_EQ(std::memcmp(chunk.data(), records.data(), records.size() * sizeof(LogRecord)), 0);
  chunk = reader.NextChunk(&first).value();
  EXPECT_EQ(first, kMaxChunkRecords);
  ASSERT_EQ(chunk.size(), 1u);
  EXPECT_TRUE(reader.NextChunk().value().empty());
  EXPECT_TRUE(reader.NextChunk().value().empty());
}

TEST(FslogReaderTest, StreamsALogLargerThanItsBuffer) {
  // 20 MB of chunks through a ~1 MB buffer.
  const std::string path = TempLogPath("large");
  uint64_t written = 0;
  {
    auto writer = FslogWriter::Open(path, {}, {.block_when_full = true}).value();
    for (; written < 250'000; ++written) writer->OnEvent(SampleEvent(EventKind::kAlloc, written));
  }
  auto reader = FslogReader::Open(path).value();
  LogEntry entry;
  uint64_t n = 0;
  while (reader.Next(&entry).value()) {
    ASSERT_EQ(entry.sequence, n);
    ASSERT_EQ(entry.event().ptr, SampleEvent(EventKind::kAlloc, n).ptr);
    ++n;
  }
  EXPECT_EQ(n, written);
  EXPECT_TRUE(reader.warnings().empty());
}

}  // namespace
}  // namespace fragscope::testing
