// FslogReader on compressed logs (fslog_zstd_input.h): chunks stored as zstd frames (Note
// [Compressed chunks]) and whole files compressed by the zstd tool; torn tails and corrupt frames.
#include <zstd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string Zstd(std::string_view bytes, int level = 3) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), level);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::vector<LogRecord> Allocs(uint64_t first, uint64_t n) {
  std::vector<LogRecord> records;
  for (uint64_t i = 0; i < n; ++i) records.push_back(EncodedSample(EventKind::kAlloc, first + i));
  return records;
}

// A log of `chunks` chunks of 300 records, each stored as a zstd frame when `compress(c)`. Its
// bytes and each chunk's end offset.
struct Built {
  std::string bytes;
  size_t header_bytes = 0;
  std::vector<size_t> chunk_ends;
};
template <typename Compress>
Built BuildLog(int chunks, Compress compress) {
  FslogHeader header = SampleHeader();
  header.device_index = 0;
  header.zstd_chunks = true;
  LogBuilder builder(header);
  Built built;
  built.header_bytes = builder.bytes().size();
  for (int c = 0; c < chunks; ++c) {
    std::vector<LogRecord> records = Allocs(300 * static_cast<uint64_t>(c), 300);
    for (LogRecord& r : records) r.device = 0;
    const size_t start = builder.bytes().size();
    builder.AddChunk(records);
    if (compress(c)) {
      const std::string frame = Zstd(std::string_view(builder.bytes()).substr(start));
      builder.bytes().resize(start);
      builder.bytes() += frame;
    }
    built.chunk_ends.push_back(builder.bytes().size());
  }
  built.bytes = builder.bytes();
  return built;
}

TEST(FslogReaderZstdTest, CompressedAndPlainChunksMixInOneLog) {
  const Built log = BuildLog(4, [](int c) { return c % 2 == 0; });
  const ReadResult result = ReadBytes(log.bytes);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), 1200u);
  for (size_t i = 0; i < result.entries.size(); ++i) {
    ASSERT_EQ(result.entries[i].sequence, i);
    ASSERT_EQ(result.entries[i].event().ptr, EncodedSample(EventKind::kAlloc, i).words[kWordPtr]);
  }
  EXPECT_TRUE(result.warnings.empty());
  auto reader = FslogReader::OpenBytes(log.bytes);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->header().zstd_chunks);
  for (size_t c = 0; c < log.chunk_ends.size(); ++c) {
    ASSERT_EQ(reader->NextChunk()->size(), 300u);
    EXPECT_EQ(reader->offset(), log.chunk_ends[c]) << "offsets are the file's";
  }
}

TEST(FslogReaderZstdTest, TruncatedFrameIsATornTailAtItsOffset) {
  const Built log = BuildLog(3, [](int) { return true; });
  for (size_t length = log.header_bytes; length <= log.bytes.size(); ++length) {
    SCOPED_TRACE(absl::StrFormat("length %d", length));
    const ReadResult result = ReadBytes(std::string_view(log.bytes).substr(0, length));
    ASSERT_TRUE(result.status.ok()) << result.status;
    size_t complete_end = log.header_bytes;
    size_t complete = 0;
    for (size_t c = 0; c < log.chunk_ends.size(); ++c) {
      if (log.chunk_ends[c] <= length) complete_end = log.chunk_ends[c], complete = 300 * (c + 1);
    }
    EXPECT_EQ(result.entries.size(), complete);
    EXPECT_EQ(result.torn_tail_bytes, length - complete_end);
    if (length == complete_end) {
      EXPECT_TRUE(result.warnings.empty());
    } else {
      ASSERT_EQ(result.warnings.size(), 1u);
      EXPECT_TRUE(Contains(result.warnings[0], "torn tail")) << result.warnings[0];
      EXPECT_TRUE(Contains(result.warnings[0], absl::StrFormat("offset %d", complete_end)))
          << result.warnings[0];
    }
  }
}

// zstd frames carry no checksum here: the chunk's own CRCs inside the frame check its content. A
// flipped byte that zstd decodes to the same content (a few bits of its tables are redundant) is
// harmless; every other one is an error naming the frame's offset.
TEST(FslogReaderZstdTest, EveryFlippedByteOfAFrameIsAnErrorNamingItsOffsetOrHarmless) {
  const Built log = BuildLog(3, [](int) { return true; });
  const ReadResult original = ReadBytes(log.bytes);
  int harmless = 0;
  for (size_t pos = log.header_bytes; pos < log.bytes.size(); ++pos) {
    SCOPED_TRACE(absl::StrFormat("byte %d", pos));
    std::string bytes = log.bytes;
    bytes[pos] = static_cast<char>(bytes[pos] ^ 0x5A);
    const ReadResult result = ReadBytes(bytes);
    size_t chunk_start = log.header_bytes;
    size_t before = 0;
    for (size_t c = 0; c < log.chunk_ends.size() && log.chunk_ends[c] <= pos; ++c) {
      chunk_start = log.chunk_ends[c];
      before = 300 * (c + 1);
    }
    if (result.status.ok() && result.entries.size() == original.entries.size()) {
      for (size_t i = 0; i < result.entries.size(); ++i) {
        ASSERT_EQ(
            std::memcmp(&result.entries[i].record, &original.entries[i].record, sizeof(LogRecord)),
            0);
      }
      ++harmless;
      continue;
    }
    EXPECT_EQ(result.entries.size(), before) << "records before the damage are delivered";
    if (result.status.ok()) {
      // The damage made a block look longer than the rest of the file: from here on the reader
      // cannot tell it from a frame cut short, and drops the rest as a torn tail, saying so.
      ASSERT_EQ(result.warnings.size(), 1u);
      EXPECT_TRUE(Contains(result.warnings[0], absl::StrFormat("torn tail: incomplete compressed "
                                                               "chunk at offset %d",
                                                               chunk_start)))
          << result.warnings[0];
      continue;
    }
    EXPECT_TRUE(
        Contains(std::string(result.status.message()), absl::StrFormat("offset %d:", chunk_start)))
        << result.status;
  }
  EXPECT_LT(harmless, 20);
}

TEST(FslogReaderZstdTest, WholeFileCompressedByTheZstdToolReadsLikeThePlainLog) {
  const Built plain = BuildLog(5, [](int) { return false; });
  const std::string packed = Zstd(plain.bytes, 19);
  const std::string path = TempLogPath("whole");
  WriteFileBytes(path, packed);
  const ReadResult a = ReadBytes(plain.bytes);
  for (const ReadResult& b : {ReadFile(path), ReadBytes(packed)}) {
    ASSERT_TRUE(b.status.ok()) << b.status;
    ASSERT_EQ(b.entries.size(), a.entries.size());
    for (size_t i = 0; i < a.entries.size(); ++i) {
      ASSERT_EQ(b.entries[i].record.words[kWordPtr], a.entries[i].record.words[kWordPtr]);
    }
    EXPECT_TRUE(b.warnings.empty()) << b.warnings[0];
  }
  auto reader = FslogReader::OpenBytes(packed);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->compressed());
  EXPECT_EQ(reader->header().rank, SampleHeader().rank);
}

TEST(FslogReaderZstdTest, TruncatedCompressedFileKeepsWholeChunksAndSaysSo) {
  const Built plain = BuildLog(5, [](int) { return false; });
  const std::string packed = Zstd(plain.bytes, 3);
  for (size_t length = 4; length < packed.size(); length += 7) {
    SCOPED_TRACE(absl::StrFormat("length %d", length));
    const ReadResult result = ReadBytes(std::string_view(packed).substr(0, length));
    if (!result.status.ok()) {
      // Too little left to hold the header.
      EXPECT_TRUE(result.entries.empty());
      EXPECT_TRUE(Contains(std::string(result.status.message()), "decompressed log"))
          << result.status;
      continue;
    }
    EXPECT_EQ(result.entries.size() % 300, 0u);
    ASSERT_FALSE(result.warnings.empty());
    EXPECT_TRUE(Contains(result.warnings.back(), "ends inside a zstd frame"))
        << result.warnings.back();
  }
}

TEST(FslogReaderZstdTest, CorruptCompressedFileIsAnErrorNotACrash) {
  const Built plain = BuildLog(5, [](int) { return false; });
  const std::string packed = Zstd(plain.bytes, 3);
  int errors = 0;
  for (size_t pos = 0; pos < packed.size(); pos += 3) {
    std::string bytes = packed;
    bytes[pos] = static_cast<char>(bytes[pos] ^ 0x5A);
    const ReadResult result = ReadBytes(bytes);
    if (!result.status.ok()) {
      ++errors;
      EXPECT_TRUE(Contains(std::string(result.status.message()), "offset")) << result.status;
    }
    EXPECT_LE(result.entries.size(), 1500u);
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace fragscope::testing
