// Tests of the RMM logging_resource_adaptor CSV parser (analysis/sources/rmm_csv.h).
#include "analysis/sources/rmm_csv.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

using ::testing::HasSubstr;

constexpr char kHeader[] = "Thread,Time,Action,Pointer,Size,Stream\n";

std::string Error(const std::string& text, const RmmCsvOptions& options = {}) {
  return std::string(ParseRmmCsv(text, options).status().message());
}

TEST(RmmCsvTest, ParsesEveryActionExactly) {
  const std::string text =
      std::string(kHeader) +
      "2342727,15:47:02.841961,allocate,0x10012400000,1048576,0\n"
      "2342727,15:47:02.841977,free,0x10012400000,1048576,0\n"
      "2342730,15:47:03.000102,allocate failure,(nil),85899345920,0x5581c1a0\n";
  absl::StatusOr<RmmLog> log = ParseRmmCsv(text);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->entries.size(), 3u);
  EXPECT_EQ(log->dropped_tail_bytes, 0u);
  const RmmLogEntry& a = log->entries[0];
  EXPECT_EQ(a.thread_id, 2342727u);
  EXPECT_EQ(a.time_of_day_us, ((15 * 60 + 47) * 60 + 2) * int64_t{1'000'000} + 841961);
  EXPECT_EQ(a.timestamp_us, a.time_of_day_us);
  EXPECT_EQ(a.action, RmmAction::kAllocate);
  EXPECT_EQ(a.pointer, 0x10012400000u);
  EXPECT_EQ(a.size_bytes, 1048576u);
  EXPECT_EQ(a.stream, 0u);
  EXPECT_EQ(a.line, 2u);
  EXPECT_EQ(log->entries[1].action, RmmAction::kFree);
  const RmmLogEntry& f = log->entries[2];
  EXPECT_EQ(f.action, RmmAction::kAllocateFailure);
  EXPECT_EQ(f.pointer, 0u);
  EXPECT_EQ(f.size_bytes, 85899345920u);
  EXPECT_EQ(f.stream, 0x5581c1a0u);
  EXPECT_EQ(f.thread_id, 2342730u);
  EXPECT_EQ(RmmActionName(f.action), "allocate failure");
}

TEST(RmmCsvTest, AcceptsTheVariantsOtherVersionsWrite) {
  // fmt-era "0x0" null pointers, bare-hex streams, upper-case hex, CRLF, blank lines, fewer
  // fraction digits.
  const std::string text =
      "Thread,Time,Action,Pointer,Size,Stream\r\n"
      "1,00:00:01.5,allocate,0x0,16,7f8a38001020\r\n"
      "\n"
      "1,00:00:02,free,0X7F8A40000000,16,0x2\r\n";
  absl::StatusOr<RmmLog> log = ParseRmmCsv(text);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->entries.size(), 2u);
  EXPECT_EQ(log->entries[0].pointer, 0u);
  EXPECT_EQ(log->entries[0].stream, 0x7f8a38001020u);
  EXPECT_EQ(log->entries[0].time_of_day_us, 1'500'000);
  EXPECT_EQ(log->entries[1].pointer, 0x7f8a40000000u);
  EXPECT_EQ(log->entries[1].stream, 2u);
  EXPECT_EQ(log->entries[1].time_of_day_us, 2'000'000);
  EXPECT_EQ(log->entries[1].line, 4u);
}

TEST(RmmCsvTest, UnwrapsMidnight) {
  const std::string text = std::string(kHeader) +
                           "1,23:59:59.999999,allocate,0x10,1,0\n"
                           "1,00:00:00.000001,free,0x10,1,0\n"
                           "1,00:00:00.000000,free,0x10,1,0\n";  // a small step back is not a day
  absl::StatusOr<RmmLog> log = ParseRmmCsv(text);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->entries[1].timestamp_us, int64_t{86'400'000'000} + 1);
  EXPECT_EQ(log->entries[1].timestamp_us - log->entries[0].timestamp_us, 2);
  EXPECT_EQ(log->entries[2].timestamp_us, int64_t{86'400'000'000});
}

TEST(RmmCsvTest, DropsATornLastLine) {
  const std::string text = std::string(kHeader) + "1,10:00:00.000000,allocate,0x10,16,0\n" +
                           "1,10:00:00.000001,free,0x1";
  absl::StatusOr<RmmLog> log = ParseRmmCsv(text);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->entries.size(), 1u);
  EXPECT_EQ(log->dropped_tail_bytes, 26u);
  RmmCsvOptions strict;
  strict.allow_torn_tail = false;
  EXPECT_EQ(Error(text, strict),
            "rmm csv: line 3: expected 6 comma-separated fields "
            "(Thread,Time,Action,Pointer,Size,Stream), got 4: "
            "'1,10:00:00.000001,free,0x1'");
  // Even a torn line that parses is dropped: its last field may be cut short.
  EXPECT_EQ(ParseRmmCsv(std::string(kHeader) + "1,10:00:00.000000,free,0x10,16,0")->entries.size(),
            0u);
}

TEST(RmmCsvTest, NamesLineAndColumnOfBadFields) {
  const std::string h = kHeader;
  EXPECT_EQ(Error(h + "x1,10:00:00.000000,free,0x10,16,0\n"),
            "rmm csv: line 2, column 1 (Thread): expected a decimal thread id, got 'x1'");
  EXPECT_EQ(Error(h + "1,24:00:00.000000,free,0x10,16,0\n"),
            "rmm csv: line 2, column 2 (Time): expected a time of day HH:MM:SS.ffffff, got "
            "'24:00:00.000000'");
  EXPECT_EQ(Error(h + "1,10:00:00.0000000000,free,0x10,16,0\n"),
            "rmm csv: line 2, column 2 (Time): expected a time of day HH:MM:SS.ffffff, got "
            "'10:00:00.0000000000'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,deallocate,0x10,16,0\n"),
            "rmm csv: line 2, column 3 (Action): expected allocate, free or allocate failure, got "
            "'deallocate'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,free,0xzz,16,0\n"),
            "rmm csv: line 2, column 4 (Pointer): expected a hex pointer or (nil), got '0xzz'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,free,0x10,18446744073709551616,0\n"),
            "rmm csv: line 2, column 5 (Size): expected a decimal byte count, got "
            "'18446744073709551616'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,free,0x10,-1,0\n"),
            "rmm csv: line 2, column 5 (Size): expected a decimal byte count, got '-1'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,free,0x10,16,0x11112222333344445\n"),
            "rmm csv: line 2, column 6 (Stream): expected a hex stream handle, got "
            "'0x11112222333344445'");
  EXPECT_EQ(Error(h + "1,10:00:00.000000,free,0x10,16,\n"),
            "rmm csv: line 2, column 6 (Stream): expected a hex stream handle, got ''");
  EXPECT_THAT(Error(h + "1,10:00:00.000000,free,0x10,16,0,extra\n"),
              HasSubstr("line 2: expected 6 comma-separated fields"));
  EXPECT_THAT(Error(h + "1,10:00:00.000000,free,0x10,16,0\n" + std::string(60, 'q') + "\n"),
              HasSubstr("line 3: expected 6 comma-separated fields (Thread,Time,Action,Pointer,"
                        "Size,Stream), got 1: '" +
                        std::string(40, 'q') + "...'"));
}

TEST(RmmCsvTest, RequiresTheHeader) {
  EXPECT_EQ(Error(""),
            "rmm csv: no header line 'Thread,Time,Action,Pointer,Size,Stream' (empty "
            "input)");
  EXPECT_EQ(Error("Thread,Time,Action,Pointer,Size\n"),
            "rmm csv: line 1: expected the header 'Thread,Time,Action,Pointer,Size,Stream', got "
            "'Thread,Time,Action,Pointer,Size'");
  EXPECT_TRUE(ParseRmmCsv(kHeader).ok());  // a log with no events
}

TEST(RmmCsvTest, EnforcesLimits) {
  RmmCsvOptions options;
  options.max_line_bytes = 30;
  EXPECT_EQ(Error(std::string(kHeader), options), "rmm csv: line 1 is 38 bytes long (limit 30)");
  options.max_input_bytes = 10;
  EXPECT_EQ(ParseRmmCsv(kHeader, options).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(RmmCsvTest, ReadsFilesAndNamesThemInErrors) {
  const std::string path = ::testing::TempDir() + "/rmm_log.csv";
  std::ofstream(path) << kHeader << "1,10:00:00.000000,allocate,0x10,16,0\n";
  absl::StatusOr<RmmLog> log = ReadRmmCsvFile(path);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->entries.size(), 1u);
  std::ofstream(path) << "bad\n";
  EXPECT_THAT(ReadRmmCsvFile(path).status().message(), HasSubstr(path + ": rmm csv: line 1"));
  std::remove(path.c_str());
  EXPECT_EQ(ReadRmmCsvFile(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fragscope
