#include "cli/dump_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"

namespace fragscope::cli {
namespace {

using ::fragscope::testing::SampleEvent;
using ::fragscope::testing::TempLogPath;

struct DumpRun {
  int status = 0;
  std::string out;
  std::string err;
  std::vector<std::string> lines;
};

DumpRun Dump(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  DumpRun run;
  run.status = RunDumpCommand(args, out, err);
  run.out = out.str();
  run.err = err.str();
  for (absl::string_view line : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    run.lines.emplace_back(line);
  }
  return run;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string WriteLog() {
  const std::string path = TempLogPath("dump");
  FslogHeaderInfo info;
  info.device_name = "Simulated H100";
  info.device_total_bytes = 80ull << 30;
  info.allocator_options = "max_split_size_mb:128";
  auto writer = FslogWriter::Open(path, info).value();
  AllocatorEvent segment;
  segment.kind = EventKind::kSegmentAlloc;
  segment.pool = PoolKind::kLarge;
  segment.ptr = 0x7f0000000000;
  segment.bytes = 20 << 20;
  writer->OnEvent(segment);
  AllocatorEvent alloc;
  alloc.kind = EventKind::kAlloc;
  alloc.pool = PoolKind::kLarge;
  alloc.ptr = 0x7f0000000000;
  alloc.segment = 0x7f0000000000;
  alloc.bytes = 2 << 20;
  alloc.requested_bytes = 2000000;
  alloc.split_bytes = 18 << 20;
  writer->OnEvent(alloc);
  writer->Mark("step 1 / forward");
  writer->RecordOptionsChange("expandable_segments:True");
  AllocatorEvent free_requested = alloc;
  free_requested.kind = EventKind::kFreeRequested;
  free_requested.split_bytes = 0;
  writer->OnEvent(free_requested);
  EXPECT_TRUE(writer->Flush().ok());  // the OOM gets a chunk of its own
  writer->OnEvent(SampleEvent(EventKind::kOom, 1));
  return path;
}

TEST(DumpCommandTest, PrintsOneLinePerRecordInHumanUnits) {
  const DumpRun run = Dump({WriteLog()});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");
  ASSERT_EQ(run.lines.size(), 6u) << run.out;
  EXPECT_TRUE(Contains(run.lines[0], "#0 +")) << run.lines[0];
  EXPECT_TRUE(Contains(run.lines[0], "segment_alloc")) << run.lines[0];
  EXPECT_TRUE(Contains(run.lines[0], "size=20.00 MiB")) << run.lines[0];
  EXPECT_TRUE(Contains(run.lines[1], "alloc")) << run.lines[1];
  EXPECT_TRUE(Contains(run.lines[1], "ptr=0x7f0000000000 size=2.00 MiB requested=1.91 MiB"))
      << run.lines[1];
  EXPECT_TRUE(Contains(run.lines[1], "split_remainder=18.00 MiB")) << run.lines[1];
  EXPECT_TRUE(Contains(run.lines[2], "marker")) << run.lines[2];
  EXPECT_TRUE(Contains(run.lines[2], "'step 1 / forward'")) << run.lines[2];
  EXPECT_TRUE(Contains(run.lines[3], "options_change 'expandable_segments:True'")) << run.lines[3];
  EXPECT_TRUE(Contains(run.lines[4], "free_requested")) << run.lines[4];
  EXPECT_TRUE(Contains(run.lines[5], "#5 ")) << run.lines[5];
  EXPECT_TRUE(Contains(run.lines[5], "oom")) << run.lines[5];
  EXPECT_TRUE(Contains(run.lines[5], "device_total=")) << run.lines[5];
}

TEST(DumpCommandTest, FiltersByKindAndSequenceRange) {
  const std::string path = WriteLog();
  DumpRun run = Dump({path, "--kind", "alloc,oom"});
  ASSERT_EQ(run.lines.size(), 2u) << run.out;
  EXPECT_TRUE(Contains(run.lines[0], "#1 "));
  EXPECT_TRUE(Contains(run.lines[1], "#5 "));
  run = Dump({path, "--from=2", "--to", "4"});
  ASSERT_EQ(run.lines.size(), 3u) << run.out;
  EXPECT_TRUE(Contains(run.lines[0], "#2 "));
  EXPECT_TRUE(Contains(run.lines[2], "#4 "));
  // An empty answer past the end says so, so that it is not taken for an empty log.
  run = Dump({path, "--from", "100"});
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(run.lines.empty()) << run.out;
  EXPECT_TRUE(Contains(run.err, "--from 100 is past the log's last event")) << run.err;
  run = Dump({path, "--bytes", "--kind=segment_alloc"});
  ASSERT_EQ(run.lines.size(), 1u);
  EXPECT_TRUE(Contains(run.lines[0], "size=20971520")) << run.lines[0];
}

TEST(DumpCommandTest, HeaderOption) {
  const DumpRun run = Dump({WriteLog(), "--header", "--kind", "marker"});
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(
      Contains(run.out, absl::StrFormat("format: %d.%d", kFormatVersionMajor, kFormatVersionMinor)))
      << run.out;
  EXPECT_TRUE(Contains(run.out, "parallel: pp_size not given, tp_size not given")) << run.out;
  EXPECT_TRUE(Contains(run.out, "'Simulated H100' 80.00 GiB")) << run.out;
  EXPECT_TRUE(Contains(run.out, "options: 'max_split_size_mb:128'")) << run.out;
  EXPECT_TRUE(Contains(run.out, "UTC")) << run.out;
}

// 64 KiB of every byte value, as a damaged or hostile log's texts.
std::string BinaryText() {
  std::string text(64 * 1024, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 + 1);
  return text;
}

// A log's texts are quoted as short escaped excerpts that say how much they leave out: the
// header's options text (64 KiB), an options change (the writer keeps 4096 bytes of it), a
// marker (56) and the model record (4096), each given 64 KiB of binary.
TEST(DumpCommandTest, TextsAreShortEscapedExcerpts) {
  const std::string path = TempLogPath("dump-binary");
  FslogHeaderInfo info;
  info.allocator_options = BinaryText();
  auto writer = FslogWriter::Open(path, info).value();
  writer->Mark(BinaryText());
  writer->RecordOptionsChange(BinaryText());
  writer->RecordModel(BinaryText());
  writer.reset();  // closes the log
  const DumpRun run = Dump({path, "--header"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_LT(run.out.size(), 2500u) << run.out;
  EXPECT_TRUE(Contains(run.out, "options: '\\x01\\x08\\x0f")) << run.out;
  EXPECT_TRUE(Contains(run.out, "... (65536 bytes, 65456 left out)'\n")) << run.out;
  ASSERT_EQ(run.lines.size(), 12u) << run.out;  // 9 header lines and 3 records
  EXPECT_TRUE(Contains(run.lines[9], " marker ")) << run.lines[9];
  EXPECT_TRUE(Contains(run.lines[9], " '\\x01\\x08\\x0f")) << run.lines[9];
  EXPECT_TRUE(Contains(run.lines[9], "' thread=")) << run.lines[9];
  EXPECT_TRUE(Contains(run.lines[9], " truncated")) << run.lines[9];
  for (size_t i : {size_t{10}, size_t{11}}) {
    EXPECT_TRUE(Contains(run.lines[i], "... (4096 bytes, 4016 left out)' truncated"))
        << run.lines[i];
  }
}

TEST(DumpCommandTest, HelpAndUsageErrors) {
  DumpRun run = Dump({"--help"});
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(Contains(run.out, "usage: fragscope dump LOG"));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"a", "b"},
                                             {"a", "--kind", "mystery"},
                                             {"a", "--kind", ""},
                                             {"a", "--from"},
                                             {"a", "--to", "x"},
                                             {"a", "--frobnicate"},
                                             {"a", "--from", "5", "--to", "4"}}) {
    run = Dump(args);
    EXPECT_EQ(run.status, 2) << args.size();
    EXPECT_TRUE(Contains(run.err, "fragscope dump:")) << run.err;
  }
}

TEST(DumpCommandTest, BadFilesExitOneAfterPrintingWhatPrecedesTheDamage) {
  EXPECT_EQ(Dump({"/nonexistent/x.fslog"}).status, 1);
  const std::string path = WriteLog();
  std::string bytes = testing::FileBytes(path);
  bytes[bytes.size() - 10] ^= 1;  // the last chunk (the OOM's) is corrupt
  testing::WriteFileBytes(path, bytes);
  DumpRun run = Dump({path});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.lines.size(), 5u) << run.out;
  EXPECT_TRUE(Contains(run.err, "corrupt chunk")) << run.err;
  // A torn tail is only a warning.
  testing::WriteFileBytes(path, bytes.substr(0, bytes.size() - 10));
  run = Dump({path});
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.lines.size(), 5u);
  EXPECT_TRUE(Contains(run.err, "warning:")) << run.err;
  EXPECT_TRUE(Contains(run.err, "torn tail")) << run.err;
}

}  // namespace
}  // namespace fragscope::cli
