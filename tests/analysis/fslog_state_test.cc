// State records (Note [State records] in fslog/fslog_format.h): the memory an .fslog says
// was held before its first event, written by FslogFileWriter::AppendState and read by
// FslogSource into TraceInfo::initial_segments; malformed state is an error naming the offset.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/fslog_source.h"
#include "fslog/fslog_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

constexpr DevicePtr kSeg = 0x7f0000000000;

LogRecord StateSegment(DevicePtr ptr, uint64_t bytes, PoolKind pool = PoolKind::kLarge,
                       StreamId stream = 0, int32_t device = 3) {
  LogRecord r;
  EncodeStateRecord(kRecordKindStateSegment, ptr, bytes, 0, stream, ptr, pool, device,
                    1'000'000'000, &r);
  return r;
}

LogRecord StateBlock(DevicePtr ptr, uint64_t bytes, uint64_t requested, DevicePtr segment = kSeg,
                     StreamId stream = 0) {
  LogRecord r;
  EncodeStateRecord(kRecordKindStateBlock, ptr, bytes, requested, stream, segment, PoolKind::kLarge,
                    3, 1'000'000'000, &r);
  return r;
}

void ExpectSameState(const std::vector<InitialSegment>& got,
                     const std::vector<InitialSegment>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].address, want[i].address) << i;
    EXPECT_EQ(got[i].size, want[i].size) << i;
    EXPECT_EQ(got[i].pool, want[i].pool) << i;
    EXPECT_EQ(got[i].stream, want[i].stream) << i;
    ASSERT_EQ(got[i].allocated.size(), want[i].allocated.size()) << i;
    for (size_t j = 0; j < got[i].allocated.size(); ++j) {
      EXPECT_EQ(got[i].allocated[j].address, want[i].allocated[j].address) << i << "." << j;
      EXPECT_EQ(got[i].allocated[j].size, want[i].allocated[j].size) << i << "." << j;
      EXPECT_EQ(got[i].allocated[j].requested_bytes, want[i].allocated[j].requested_bytes)
          << i << "." << j;
    }
  }
}

TEST(FslogStateTest, WriterAndSourceRoundTripTheStateAndNumberEventsAfterIt) {
  const std::vector<InitialSegment> state = {
      {kSeg,
       20 * kMiB,
       PoolKind::kLarge,
       0,
       {{kSeg, 4 * kMiB, 4'000'000}, {kSeg + 6 * kMiB, 2 * kMiB, 2 * kMiB}}},
      {kSeg + 20 * kMiB, 2 * kMiB, PoolKind::kSmall, 7, {}},
  };
  const std::string path = TempPath("state.fslog");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FslogFileWriter> writer,
                       FslogFileWriter::Open(path, SampleHeader()));
  writer->AppendState(state);
  AllocatorEvent alloc = SampleEvent(EventKind::kAlloc, 3);  // device 3
  writer->Append(alloc, 5);
  ASSERT_OK(writer->Close());
  EXPECT_EQ(writer->records(), 5u);
  EXPECT_EQ(writer->events(), 1u);
  for (FslogReading reading : {FslogReading::kCallingThread, FslogReading::kBackgroundThread}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<FslogSource> source, FslogSource::Open(path, reading));
    ExpectSameState(source->info().initial_segments, state);
    TraceEvent event;
    ASSERT_OK_AND_ASSIGN(bool more, source->Next(&event));
    ASSERT_TRUE(more);
    EXPECT_EQ(event.kind, EventKind::kAlloc);
    EXPECT_EQ(event.index, 4u);  // the four state records took 0..3
    EXPECT_EQ(event.ptr, alloc.ptr);
    ASSERT_OK_AND_ASSIGN(more, source->Next(&event));
    EXPECT_FALSE(more);
  }
}

// State may span chunks; a log without events is only state; a log without state has none.
TEST(FslogStateTest, StateAcrossChunksAndLogsOfOnlyStateOrNoState) {
  LogBuilder builder;
  builder.AddChunk({StateSegment(kSeg, 20 * kMiB), StateBlock(kSeg, kMiB, 1000)});
  builder.AddChunk({StateBlock(kSeg + 4 * kMiB, kMiB, kMiB), EncodedSample(EventKind::kAlloc, 3)});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FslogSource> source,
                       FslogSource::OpenBytes(builder.bytes()));
  ExpectSameState(source->info().initial_segments,
                  {{kSeg,
                    20 * kMiB,
                    PoolKind::kLarge,
                    0,
                    {{kSeg, kMiB, 1000}, {kSeg + 4 * kMiB, kMiB, kMiB}}}});
  TraceEvent event;
  ASSERT_OK_AND_ASSIGN(bool more, source->Next(&event));
  ASSERT_TRUE(more);
  EXPECT_EQ(event.index, 3u);

  LogBuilder only_state;
  only_state.AddChunk({StateSegment(kSeg, 2 * kMiB, PoolKind::kSmall)});
  ASSERT_OK_AND_ASSIGN(source, FslogSource::OpenBytes(only_state.bytes()));
  EXPECT_EQ(source->info().initial_segments.size(), 1u);
  ASSERT_OK_AND_ASSIGN(more, source->Next(&event));
  EXPECT_FALSE(more);

  LogBuilder no_state;
  no_state.AddChunk({EncodedSample(EventKind::kAlloc, 3)});
  ASSERT_OK_AND_ASSIGN(source, FslogSource::OpenBytes(no_state.bytes()));
  EXPECT_TRUE(source->info().initial_segments.empty());
}

TEST(FslogStateTest, MalformedStateIsAnErrorNamingTheRecordsOffset) {
  struct Case {
    std::vector<LogRecord> records;
    size_t bad_record;
    std::string message;
  };
  LogRecord other_device = StateSegment(kSeg, 2 * kMiB, PoolKind::kSmall, 0, /*device=*/1);
  LogRecord bad_pool = StateSegment(kSeg, 2 * kMiB);
  bad_pool.pool = 2;
  const std::vector<Case> cases = {
      {{StateBlock(kSeg, kMiB, kMiB)}, 0, "state_block before any state_segment"},
      {{StateSegment(kSeg, 0)}, 0, "of 0 bytes (a size of 0"},
      {{StateSegment(~DevicePtr{0} - 4096, 2 * kMiB)}, 0, "past the end of the address space"},
      {{other_device}, 0, "state_segment on device 1, but the log header says device 3"},
      {{bad_pool}, 0, "state_segment with pool 2 (0 small, 1 large)"},
      {{StateSegment(kSeg, 2 * kMiB), StateBlock(kSeg + kMiB, 2 * kMiB, kMiB)},
       1,
       "lies outside its segment"},
      {{StateSegment(kSeg, 2 * kMiB), StateBlock(kSeg - 512, 1024, 512)},
       1,
       "lies outside its segment"},
      {{StateSegment(kSeg, 4 * kMiB), StateBlock(kSeg, kMiB, kMiB),
        StateBlock(kSeg + kMiB / 2, kMiB, kMiB)},
       2,
       "overlaps or precedes the block"},
      {{StateSegment(kSeg, 4 * kMiB), StateBlock(kSeg + 2 * kMiB, kMiB, kMiB),
        StateBlock(kSeg, kMiB, kMiB)},
       2,
       "(blocks come in address order)"},
      {{StateSegment(kSeg, 4 * kMiB), StateBlock(kSeg, kMiB, kMiB + 1)},
       1,
       "requests 1048577 bytes, more than its 1048576"},
      {{StateSegment(kSeg, 4 * kMiB), StateBlock(kSeg, kMiB, kMiB, kSeg + 4 * kMiB)},
       1,
       "names segment 0x7f0000400000, but follows the segment at 0x7f0000000000"},
      {{StateSegment(kSeg, 4 * kMiB), StateBlock(kSeg, kMiB, kMiB, kSeg, /*stream=*/9)},
       1,
       "is on stream 9, its segment on stream 0"},
  };
  for (const Case& c : cases) {
    LogBuilder builder;
    const size_t chunk = builder.AddChunk(c.records);
    absl::StatusOr<std::unique_ptr<FslogSource>> source =
        FslogSource::OpenBytes(builder.bytes(), "job.fslog");
    ASSERT_FALSE(source.ok()) << c.message;
    EXPECT_THAT(source.status().message(),
                HasSubstr(absl::StrFormat("job.fslog: bad state record at file offset %d: ",
                                          chunk + kChunkHeaderBytes + c.bad_record * kRecordBytes)))
        << c.message;
    EXPECT_THAT(source.status().message(), HasSubstr(c.message));
  }
  LogBuilder overlapping;
  overlapping.AddChunk({StateSegment(kSeg + 2 * kMiB, 20 * kMiB), StateSegment(kSeg, 4 * kMiB)});
  absl::StatusOr<std::unique_ptr<FslogSource>> source =
      FslogSource::OpenBytes(overlapping.bytes(), "job.fslog");
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(source.status().message(),
              HasSubstr("job.fslog: bad state records: the segments [0x7f0000000000, "
                        "0x7f0000400000) and [0x7f0000200000, 0x7f0001600000) overlap"));
}

// State records lead the log: one after an event is an error when it is reached, after the events
// before it (which do not change the state the replay began with).
TEST(FslogStateTest, StateAfterTheFirstEventIsAnError) {
  for (FslogReading reading : {FslogReading::kCallingThread, FslogReading::kBackgroundThread}) {
    LogBuilder builder;
    builder.AddChunk({StateSegment(kSeg, 2 * kMiB), EncodedSample(EventKind::kAlloc, 3)});
    builder.AddChunk({StateSegment(kSeg + 2 * kMiB, 2 * kMiB)});
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<FslogSource> source,
                         FslogSource::OpenBytes(builder.bytes(), "job.fslog", reading));
    EXPECT_EQ(source->info().initial_segments.size(), 1u);
    TraceEvent event;
    ASSERT_OK_AND_ASSIGN(bool more, source->Next(&event));
    ASSERT_TRUE(more);
    absl::StatusOr<bool> late = source->Next(&event);
    ASSERT_FALSE(late.ok());
    EXPECT_THAT(late.status().message(),
                HasSubstr("job.fslog: bad state record: state_segment record 2 comes after the "
                          "log's first event"));
  }
}

}  // namespace
}  // namespace fragscope::testing
