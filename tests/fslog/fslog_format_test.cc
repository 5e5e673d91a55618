#include "fslog/fslog_format.h"

#include <climits>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "fslog/allocation_role.h"
#include "fslog/crc32c.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::testing {
namespace {

TEST(FslogFormatTest, EncodeDecodeIsLosslessForEveryKind) {
  for (EventKind kind : kAllocatorKinds) {
    for (uint64_t seed : {0u, 1u, 2u, 77u}) {
      const AllocatorEvent event = SampleEvent(kind, seed);
      LogRecord record;
      std::memset(&record, 0xAB, sizeof(record));
      EncodeEvent(event, 123 + seed, &record);
      EXPECT_EQ(record.timestamp_ns, 123 + seed);
      EXPECT_EQ(record.kind, static_cast<uint8_t>(kind));
      EXPECT_EQ(record.words[7], 0u) << "the spare word is zero";
      EXPECT_TRUE(SameEvent(DecodeEvent(record), event)) << EventKindName(kind) << " " << seed;
    }
  }
}

TEST(FslogFormatTest, LayoutsPutFieldsAtTheDocumentedWords) {
  AllocatorEvent alloc = SampleEvent(EventKind::kAlloc, 5);
  LogRecord record;
  EncodeEvent(alloc, 0, &record);
  EXPECT_EQ(record.words[0], alloc.ptr);
  EXPECT_EQ(record.words[1], alloc.bytes);
  EXPECT_EQ(record.words[2], alloc.requested_bytes);
  EXPECT_EQ(record.words[3], alloc.stream);
  EXPECT_EQ(record.words[4], alloc.segment);
  EXPECT_EQ(record.words[5], alloc.split_bytes);
  EXPECT_EQ(record.words[6], alloc.result_bytes);
  AllocatorEvent oom = SampleEvent(EventKind::kOom, 5);
  EncodeEvent(oom, 0, &record);
  EXPECT_EQ(record.words[0], oom.device_free_bytes);
  EXPECT_EQ(record.words[1], oom.bytes);
  EXPECT_EQ(record.words[2], oom.requested_bytes);
  EXPECT_EQ(record.words[3], oom.stream);
  EXPECT_EQ(record.words[4], oom.device_total_bytes);
  EXPECT_EQ(record.words[5], oom.reserved_bytes);
  EXPECT_EQ(record.words[6], oom.allocated_bytes);
}

TEST(FslogFormatTest, TruncateUtf8NeverSplitsACharacter) {
  EXPECT_EQ(TruncateUtf8("hello", 10), "hello");
  EXPECT_EQ(TruncateUtf8("hello", 3), "hel");
  const std::string text =
      "ab\xC3\xA9"
      "cd\xE2\x82\xAC";  // "abécd€"
  EXPECT_EQ(TruncateUtf8(text, 3), "ab");
  EXPECT_EQ(TruncateUtf8(text, 4), "ab\xC3\xA9");
  EXPECT_EQ(TruncateUtf8(text, 7),
            "ab\xC3\xA9"
            "cd");
  EXPECT_EQ(TruncateUtf8(text, 8),
            "ab\xC3\xA9"
            "cd");
  EXPECT_EQ(TruncateUtf8(text, 9), text);
}

TEST(FslogFormatTest, MarkerKeepsShortTextAndFlagsTruncation) {
  LogRecord record;
  EncodeMarker("step 12 / forward", 99, 7, &record);
  EXPECT_EQ(record.kind, static_cast<uint8_t>(EventKind::kMarker));
  EXPECT_EQ(MarkerText(record), "step 12 / forward");
  EXPECT_EQ(record.flags, 0);
  EXPECT_EQ(record.words[0], 99u);
  const std::string long_text(100, 'x');
  EncodeMarker(long_text, 1, 7, &record);
  EXPECT_EQ(MarkerText(record), std::string(kMaxMarkerTextBytes, 'x'));
  EXPECT_EQ(record.flags, kRecordFlagTruncated);
  record.aux = 255;  // corrupt length: still bounded by the record
  EXPECT_EQ(MarkerText(record).size(), kMaxMarkerTextBytes);
}

// Note [Tag records]: the block's address in word 0, the role in word 1, nothing else.
TEST(FslogFormatTest, TagRecordsCarryTheBlockAndItsRole) {
  LogRecord record;
  EncodeTag(0x7f0000200000, static_cast<uint8_t>(AllocationRole::kSavedActivations), 42, 3,
            &record);
  EXPECT_EQ(record.kind, static_cast<uint8_t>(EventKind::kTag));
  EXPECT_EQ(record.timestamp_ns, 42u);
  EXPECT_EQ(record.device, 3);
  EXPECT_EQ(record.flags, 0);
  EXPECT_EQ(record.words[kWordPtr], 0x7f0000200000u);
  EXPECT_EQ(record.words[kWordTagRole], 5u);
  for (int w = 2; w < 8; ++w) EXPECT_EQ(record.words[w], 0u) << "word " << w;
  EXPECT_EQ(RecordKindName(record.kind), "tag");
  EXPECT_EQ(AllocationRoleOf(5), AllocationRole::kSavedActivations);
  EXPECT_EQ(AllocationRoleOf(kAllocationRoleCount), std::nullopt);
  for (int r = 0; r < kAllocationRoleCount; ++r) {
    EXPECT_NE(AllocationRoleName(static_cast<AllocationRole>(r)), "");
  }
}

TEST(FslogFormatTest, OptionsChangeSpansContinuationRecords) {
  for (size_t length : {0u, 1u, 56u, 57u, 120u, 121u, 1000u, 4096u, 5000u}) {
    std::string text(length, '\0');
    for (size_t i = 0; i < length; ++i) text[i] = static_cast<char>('a' + i % 26);
    LogRecord records[kMaxOptionsChangeRecords];
    const size_t n = EncodeOptionsChange(text, 5, 2, records);
    ASSERT_GE(n, 1u);
    ASSERT_LE(n, kMaxOptionsChangeRecords);
    std::string joined;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(records[i].kind, static_cast<uint8_t>(EventKind::kOptionsChange));
      EXPECT_EQ(records[i].device, 2);
      EXPECT_EQ((records[i].flags & kRecordFlagContinuation) != 0, i > 0);
      joined += OptionsChangeTextPart(records[i]);
    }
    const size_t kept = std::min(length, kMaxOptionsChangeTextBytes);
    EXPECT_EQ(joined, text.substr(0, kept));
    EXPECT_EQ(records[0].words[0], kept);
    EXPECT_EQ((records[0].flags & kRecordFlagTruncated) != 0, length > kept);
  }
}

TEST(FslogFormatTest, HeaderRoundTripsEveryField) {
  const FslogHeader header = SampleHeader();
  const std::string bytes = SerializeFileHeader(header);
  EXPECT_EQ(bytes.size() % 8, 0u);
  ASSERT_EQ(ParseFileHeaderSize(bytes).value(), bytes.size());
  const FslogHeader parsed = ParseFileHeader(bytes).value();
  EXPECT_EQ(parsed.version_major, kFormatVersionMajor);
  EXPECT_EQ(parsed.version_minor, kFormatVersionMinor);
  EXPECT_EQ(parsed.header_bytes, bytes.size());
  EXPECT_EQ(parsed.clock, header.clock);
  EXPECT_EQ(parsed.device_index, header.device_index);
  EXPECT_EQ(parsed.device_total_bytes, header.device_total_bytes);
  EXPECT_EQ(parsed.pid, header.pid);
  EXPECT_EQ(parsed.rank, header.rank);
  EXPECT_EQ(parsed.local_rank, header.local_rank);
  EXPECT_EQ(parsed.world_size, header.world_size);
  EXPECT_EQ(parsed.start_wall_ns, header.start_wall_ns);
  EXPECT_EQ(parsed.start_monotonic_ns, header.start_monotonic_ns);
  EXPECT_EQ(parsed.device_name, header.device_name);
  EXPECT_EQ(parsed.host, header.host);
  EXPECT_EQ(parsed.allocator_options, header.allocator_options);
}

TEST(FslogFormatTest, HeaderTruncatesLongStringsToTheirFields) {
  FslogHeader header = SampleHeader();
  header.device_name = std::string(100, 'd');
  header.host = std::string(64, 'h');
  header.allocator_options = std::string(kMaxHeaderOptionsBytes + 10, 'o');
  const FslogHeader parsed = ParseFileHeader(SerializeFileHeader(header)).value();
  EXPECT_EQ(parsed.device_name, std::string(64, 'd'));
  EXPECT_EQ(parsed.host, std::string(64, 'h'));
  EXPECT_EQ(parsed.allocator_options.size(), kMaxHeaderOptionsBytes);
}

TEST(FslogFormatTest, HeaderErrorsNameTheOffset) {
  const std::string good = SerializeFileHeader(SampleHeader());
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(ParseFileHeaderSize(bad_magic).status().message().find("offset 0: bad magic"),
            std::string::npos);
  FslogHeader v3 = SampleHeader();
  v3.version_major = 3;
  v3.version_minor = 0;
  EXPECT_NE(ParseFileHeaderSize(SerializeFileHeader(v3))
                .status()
                .message()
                .find("offset 8: unknown format version 3.0"),
            std::string::npos);
  FslogHeader newer_minor = SampleHeader();
  newer_minor.version_minor = 9;
  EXPECT_TRUE(ParseFileHeader(SerializeFileHeader(newer_minor)).ok());
  std::string bad_crc = good;
  bad_crc[100] ^= 1;
  EXPECT_NE(ParseFileHeader(bad_crc).status().message().find("offset 16: file header CRC"),
            std::string::npos);
  EXPECT_FALSE(ParseFileHeaderSize(good.substr(0, 100)).ok());
}

TEST(FslogFormatTest, DeviceIndexMustBeACudaOrdinal) {
  // A header naming device 2^31 - 1 once made `fragscope convert` size a snapshot's per-device
  // trace list by it (a fuzz finding: trace_analysis_fuzz).
  for (const int32_t device : {0, kMaxDeviceIndex}) {
    FslogHeader header = SampleHeader();
    header.device_index = device;
    EXPECT_EQ(ParseFileHeader(SerializeFileHeader(header)).value().device_index, device);
  }
  for (const int32_t device : {-1, kMaxDeviceIndex + 1, INT32_MAX, INT32_MIN}) {
    FslogHeader header = SampleHeader();
    header.device_index = device;
    const absl::Status status = ParseFileHeader(SerializeFileHeader(header)).status();
    EXPECT_EQ(status.message(),
              absl::StrFormat("offset 28: device index %d is not a CUDA device ordinal (0 to 127)",
                              device));
  }
}

TEST(FslogFormatTest, SealChunkChecksumsHeaderAndPayload) {
  LogRecord records[2];
  EncodeEvent(SampleEvent(EventKind::kAlloc, 1), 1, &records[0]);
  EncodeEvent(SampleEvent(EventKind::kFreeRequested, 1), 2, &records[1]);
  ChunkHeader chunk;
  SealChunk(2, 40, records, &chunk);
  EXPECT_EQ(chunk.magic, kChunkMagic);
  EXPECT_EQ(chunk.record_count, 2u);
  EXPECT_EQ(chunk.payload_bytes, 2 * kRecordBytes);
  EXPECT_EQ(chunk.first_sequence, 40u);
  EXPECT_EQ(chunk.payload_crc32c, Crc32c(records, sizeof(records)));
  EXPECT_EQ(chunk.header_crc32c, Crc32c(&chunk, kChunkHeaderCrcCoveredBytes));
  EXPECT_EQ(std::memcmp(&chunk, "FSCK", 4), 0);
}

}  // namespace
}  // namespace fragscope::testing
