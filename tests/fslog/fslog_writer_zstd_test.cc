// FslogWriter with compressed chunks (FslogWriterOptions::zstd_level; Note [Writing
// compressed chunks]), and the header fields of format 2.3 (Note [Who wrote the log]).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/time.h"
#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/fslog/fslog_writer_test_util.h"

namespace fragscope::testing {
namespace {

bool ZstdMagicAt(const std::string& bytes, size_t offset) {
  uint32_t magic = 0;
  if (offset + 4 > bytes.size()) return false;
  std::memcpy(&magic, bytes.data() + offset, 4);
  return magic == kZstdFrameMagic;
}

void ExpectIds(const ReadResult& result, uint64_t events) {
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), events);
  for (uint64_t i = 0; i < events; ++i) ASSERT_EQ(IdOf(result.entries[i]), i) << i;
}

// Writes `events` allocs (ids 0..events-1) with the given options; returns the path.
std::string WriteAllocs(const std::string& name, uint64_t events, FslogWriterOptions options) {
  const std::string path = TempLogPath(name);
  auto writer = FslogWriter::Open(path, WriterTestInfo(), options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (!writer.ok()) return path;
  for (uint64_t i = 0; i < events; ++i) (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, i));
  EXPECT_TRUE((*writer)->Flush().ok());
  return path;
}

TEST(FslogWriterZstdTest, CompressedLogReadsAsThePlainOneAndIsSmaller) {
  const FslogWriterOptions plain_options{.block_when_full = true};
  FslogWriterOptions zstd_options = plain_options;
  zstd_options.zstd_level = 3;
  const std::string plain = WriteAllocs("plain", 10'000, plain_options);
  const std::string packed = WriteAllocs("zstd", 10'000, zstd_options);
  const ReadResult a = ReadFile(plain);
  const ReadResult b = ReadFile(packed);
  ExpectIds(b, 10'000);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    ASSERT_EQ(a.entries[i].sequence, b.entries[i].sequence);
    ASSERT_EQ(std::memcmp(&a.entries[i].record.kind, &b.entries[i].record.kind,
                          sizeof(LogRecord) - sizeof(uint64_t)),
              0)
        << i;  // every byte but the timestamp
  }
  EXPECT_TRUE(b.warnings.empty());
  const std::string bytes = FileBytes(packed);
  auto reader = FslogReader::OpenBytes(bytes);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(reader->header().zstd_chunks);
  EXPECT_TRUE(ZstdMagicAt(bytes, reader->header().header_bytes));
  EXPECT_LT(bytes.size(), FileBytes(plain).size() / 2);
}

TEST(FslogWriterZstdTest, MarkersOptionsChangesAndOomSurviveCompression) {
  const std::string path = TempLogPath("zstd_kinds");
  {
    auto writer = FslogWriter::Open(path, WriterTestInfo(), {.zstd_level = 1}).value();
    writer->OnEvent(SampleEvent(EventKind::kAlloc, 0));
    writer->Mark("step 1 / forward");
    writer->RecordOptionsChange(std::string(300, 'o'));
    writer->OnEvent(SampleEvent(EventKind::kOom, 1));  // written before OnEvent returns
    const ReadResult early = ReadFile(path);
    ASSERT_TRUE(early.status.ok()) << early.status;
    ASSERT_EQ(early.entries.size(), 4u);
    EXPECT_EQ(early.entries[3].kind(), EventKind::kOom);
    writer->OnEvent(SampleEvent(EventKind::kAlloc, 2));
  }
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), 5u);
  EXPECT_EQ(result.entries[1].text, "step 1 / forward");
  EXPECT_EQ(result.entries[2].text, std::string(300, 'o'));
}

TEST(FslogWriterZstdTest, BadLevelIsAnError) {
  for (int level : {-1, 20}) {
    auto writer =
        FslogWriter::Open(TempLogPath("bad_level"), WriterTestInfo(), {.zstd_level = level});
    ASSERT_FALSE(writer.ok());
    EXPECT_NE(writer.status().message().find("zstd_level"), std::string::npos);
  }
}

// The signal path writes the unwritten records uncompressed after the compressed chunks; a
// process that survives goes on compressing from the first record it did not write.
TEST(FslogWriterZstdTest, EmergencyFlushThenGoingOnKeepsEveryRecordOnce) {
  const std::string path = TempLogPath("zstd_emergency");
  {
    auto writer = FslogWriter::Open(path, WriterTestInfo(),
                                    {.flush_interval = absl::Hours(1), .zstd_level = 3})
                      .value();
    for (uint64_t i = 0; i < 2000; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
    writer->EmergencyFlush();
    const ReadResult flushed = ReadFile(path);
    ExpectIds(flushed, 2000);
    for (uint64_t i = 2000; i < 3000; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
  }
  const ReadResult result = ReadFile(path);
  ExpectIds(result, 3000);
  EXPECT_TRUE(result.warnings.empty());
}

TEST(FslogWriterZstdTest, FatalSignalKeepsEveryRecord) {
  const std::string path = TempLogPath("zstd_signal");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit limit = {0, 0};
    setrlimit(RLIMIT_CORE, &limit);
    auto writer = FslogWriter::Open(path, WriterTestInfo(),
                                    {.flush_interval = absl::Hours(1), .zstd_level = 3});
    if (!writer.ok()) _exit(101);
    for (uint64_t i = 0; i < 2000; ++i) (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, i));
    writer->release();
    raise(SIGABRT);
    _exit(102);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ASSERT_FALSE(WIFEXITED(status) && (WEXITSTATUS(status) == 101 || WEXITSTATUS(status) == 102))
      << status;
  ExpectIds(ReadFile(path), 2000);
}

TEST(FslogWriterZstdTest, HeaderRecordsParallelSizesAndMemoryAtOpen) {
  setenv(kPipelineParallelSizeEnv, "4", 1);
  setenv(kTensorParallelSizeEnv, "8", 1);
  FslogHeaderInfo info = WriterTestInfo();
  info.device_free_bytes = 70 * kGiB;
  info.reserved_bytes = 2 * kGiB;
  const std::string path = TempLogPath("who");
  auto writer = FslogWriter::Open(path, info);
  unsetenv(kPipelineParallelSizeEnv);
  unsetenv(kTensorParallelSizeEnv);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto reader = FslogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const FslogHeader& h = reader->header();
  EXPECT_EQ(h.version_minor, kFormatVersionMinor);  // 2.3 or later
  EXPECT_EQ(h.pp_size, 4);
  EXPECT_EQ(h.tp_size, 8);
  ASSERT_TRUE(h.device_free_at_open_bytes.has_value());
  EXPECT_EQ(*h.device_free_at_open_bytes, 70 * kGiB);
  EXPECT_EQ(h.reserved_at_open_bytes, 2 * kGiB);
  EXPECT_FALSE(h.zstd_chunks);
  // Not given: nothing recorded.
  const std::string bare = TempLogPath("who_bare");
  ASSERT_TRUE(FslogWriter::Open(bare, WriterTestInfo()).ok());
  auto bare_reader = FslogReader::Open(bare);
  ASSERT_TRUE(bare_reader.ok());
  EXPECT_EQ(bare_reader->header().pp_size, 0);
  EXPECT_FALSE(bare_reader->header().device_free_at_open_bytes.has_value());
}

}  // namespace
}  // namespace fragscope::testing
