// Who holds the memory (.fslog 2.6 context records): the reader gives each alloc its context,
// a tag may change it, the OOM explanation names the request and every pinning block by role,
// module and op and lists the live bytes by module (text, JSON); a log whose strings are torn or
// whose ids point at nothing is refused, naming the record; hostile strings stay data.
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/analyzer.h"
#include "analysis/explain/block_holder.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "analysis/sources/fslog_source.h"
#include "fslog/fslog_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope {
namespace {

using ::testing::HasSubstr;
using testing::TraceBuilder;

constexpr uint32_t kLayer0 = 1, kLayer1 = 2, kMatmul = 3, kHead = 4, kSoftmax = 5;
constexpr uint32_t kActs0 = 1, kActs1 = 2, kLogits = 3, kWeights = 4;

// Layer 0's and layer 1's activations interleaved in two segments, every other one freed, then
// the head's logits: on the job's 128 MiB device they fit; replayed on 64 MiB (kReplayCapacity)
// they do not (the holes layer 1 pins are too small). An OOM record names no context (its
// words are all used): the request's context is known where the replay refuses an alloc.
constexpr uint64_t kReplayCapacity = 64 * kMiB;
std::string ContextLog(const std::string& name = "contexts.fslog") {
  TraceBuilder t(128 * kMiB, "", name);
  t.DefineString(kLayer0, "model.layers.0");
  t.DefineString(kLayer1, "model.layers.1");
  t.DefineString(kMatmul, "aten::mm");
  t.DefineString(kHead, "lm_head");
  t.DefineString(kSoftmax, "aten::_log_softmax");
  t.DefineContext({.id = kActs0,
                   .role = static_cast<uint8_t>(AllocationRole::kSavedActivations),
                   .module = kLayer0,
                   .op = kMatmul});
  t.DefineContext({.id = kActs1,
                   .role = static_cast<uint8_t>(AllocationRole::kSavedActivations),
                   .module = kLayer1,
                   .op = kMatmul});
  t.DefineContext({.id = kLogits,
                   .role = static_cast<uint8_t>(AllocationRole::kTemporaries),
                   .module = kHead,
                   .op = kSoftmax});
  t.DefineContext({.id = kWeights, .role = static_cast<uint8_t>(AllocationRole::kWeights)});
  t.Mark("step 0 / forward");
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) {
    t.SetContext(i % 2 == 0 ? kActs0 : kActs1);
    blocks.push_back(t.Alloc(5 * kMiB));
  }
  for (int i : {0, 2, 4, 6}) t.Free(blocks[static_cast<size_t>(i)]);
  // A block that becomes a weight later (a tag with a context).
  t.writer().Tag(blocks[1], AllocationRole::kWeights, 0);
  t.SetContext(kLogits);
  t.Alloc(25 * kMiB);
  return t.Finish();
}

TEST(BlockContextTest, TheReaderGivesEachAllocItsContext) {
  absl::StatusOr<std::unique_ptr<FslogSource>> source = FslogSource::Open(ContextLog());
  ASSERT_TRUE(source.ok()) << source.status();
  TraceEvent e;
  std::vector<const BlockContext*> contexts;
  for (;;) {
    absl::StatusOr<bool> more = (*source)->Next(&e);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    if (e.kind == EventKind::kAlloc) contexts.push_back(e.context);
  }
  ASSERT_EQ(contexts.size(), 9u);
  ASSERT_NE(contexts[0], nullptr);
  EXPECT_EQ(contexts[0]->module, "model.layers.0");
  EXPECT_EQ(contexts[0]->op, "aten::mm");
  EXPECT_EQ(contexts[0]->role, AllocationRole::kSavedActivations);
  EXPECT_EQ(contexts[1]->module, "model.layers.1");
  EXPECT_EQ(contexts[8]->module, "lm_head");
  EXPECT_EQ(HolderText(contexts[8]->role, *contexts[8]),
            "temporaries of lm_head (aten::_log_softmax)");
}

TEST(BlockContextTest, TheOomNamesTheRequestThePinningBlocksAndTheModules) {
  absl::StatusOr<AnalysisReport> report =
      AnalyzeTraces({ContextLog()}, {.capacity_bytes = kReplayCapacity, .run_sweep = false});
  ASSERT_TRUE(report.ok()) << report.status();
  const RankReport& rank = report->ranks.front();
  ASSERT_EQ(rank.ooms.size(), 1u);
  const OomExplanation& x = rank.ooms.front();
  EXPECT_EQ(x.request_context.module, "lm_head");
  EXPECT_EQ(x.request_context.op, "aten::_log_softmax");
  ASSERT_EQ(x.pinning.size(), 4u);
  for (const PinningBlock& p : x.pinning) {
    // Layer 1's blocks pin the segments; the one re-tagged a weight keeps its module.
    EXPECT_EQ(p.context.module, "model.layers.1");
    EXPECT_EQ(p.origin.context, nullptr);  // copied, not pointing into the closed source
  }
  // By module, as by role: the job's live requests, the one refused here included (the job was
  // granted it).
  ASSERT_EQ(x.held_by_module.size(), 2u);
  EXPECT_EQ(x.held_by_module[0].name, "lm_head");
  EXPECT_EQ(x.held_by_module[0].bytes, 25 * kMiB);
  EXPECT_EQ(x.held_by_module[1].name, "model.layers.1");
  EXPECT_EQ(x.held_by_module[1].bytes, 20 * kMiB);
  EXPECT_EQ(x.held_by_role[static_cast<size_t>(AllocationRole::kWeights)], 5 * kMiB);
  EXPECT_EQ(x.held_by_role[static_cast<size_t>(AllocationRole::kSavedActivations)], 15 * kMiB);

  std::ostringstream text;
  RenderTextReport(*report, {}, text);
  EXPECT_THAT(text.str(), HasSubstr("requested by: temporaries of lm_head (aten::_log_softmax)"));
  EXPECT_THAT(text.str(), HasSubstr("saved_activations of model.layers.1 (aten::mm)"));
  EXPECT_THAT(text.str(), HasSubstr("weights of model.layers.1 (aten::mm)"));
  EXPECT_THAT(text.str(), HasSubstr("held by module: lm_head 25.00 MiB, model.layers.1 20.00 MiB"));

  const nlohmann::ordered_json j = JsonReport(*report, {});
  const auto& oom = j["ranks"][0]["ooms"]["explained"][0];
  EXPECT_EQ(oom["request_context"]["module"], "lm_head");
  EXPECT_EQ(oom["request_context"]["role"], "temporaries");
  EXPECT_EQ(oom["pinning"][0]["module"], "model.layers.1");
  EXPECT_EQ(oom["pinning"][0]["op"], "aten::mm");
  EXPECT_EQ(oom["held_by_module"][1]["module"], "model.layers.1");
  EXPECT_EQ(oom["held_by_module"][1]["bytes"], 20 * kMiB);
}

// The job's own OOM: its record is preceded by an oom_context record naming the request's.
TEST(BlockContextTest, TheJobsOwnOomNamesItsRequest) {
  TraceBuilder t(64 * kMiB, "", "oom.fslog");
  t.DefineString(1, "lm_head");
  t.DefineContext({.id = 1, .role = 6, .module = 1});
  t.Alloc(40 * kMiB);
  t.SetContext(1);
  t.AllocExpectOom(40 * kMiB);
  t.SetContext(0);
  t.Mark("after");
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({t.Finish()}, {.run_sweep = false});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->ranks[0].ooms.size(), 1u);
  EXPECT_EQ(report->ranks[0].ooms[0].request_context.module, "lm_head");
  EXPECT_EQ(report->ranks[0].ooms[0].request_context.role, AllocationRole::kTemporaries);
}

TEST(BlockContextTest, AnOomContextNotFollowedByAnOomIsAnError) {
  TraceBuilder t(64 * kMiB, "", "stray.fslog");
  t.DefineContext({.id = 1, .role = 6});
  LogRecord stray;
  EncodeOomContext(1, 1'000'000'000, 0, &stray);
  t.writer().AppendRaw(&stray, 1);
  t.Alloc(kMiB);
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({t.Finish()}, {.run_sweep = false});
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(
      std::string(report.status().message()),
      HasSubstr("bad oom_context record 1: the record after it is segment_alloc record 2, not an "
                "oom"));
}

// The demand's peak by module: the state at the peak, not at the end (a later, lower moment of
// other modules does not replace it).
TEST(BlockContextTest, TheDemandPeakIsSplitByModule) {
  TraceBuilder t(uint64_t{1} << 30, "", "peak.fslog");
  for (uint32_t id : {1u, 2u, 3u}) {
    t.DefineString(id, absl::StrCat("module.", id));
    t.DefineContext({.id = id, .role = 6, .module = id});
  }
  t.SetContext(1);
  t.Alloc(10 * kMiB);
  t.SetContext(2);
  const DevicePtr b = t.Alloc(10 * kMiB);  // the peak: module.1 10 MiB, module.2 10 MiB
  t.Free(b);
  t.SetContext(3);
  t.Alloc(5 * kMiB);  // 15 MiB: lower
  t.SetContext(0);
  t.Alloc(kMiB);  // no module
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({t.Finish()}, {.run_sweep = false});
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::ordered_json j = JsonReport(*report, {});
  const auto& demand = j["ranks"][0]["verdict"]["demand"];
  EXPECT_EQ(demand["peak_bytes"], 20 * kMiB);
  ASSERT_EQ(demand["modules"].size(), 2u) << demand.dump();
  EXPECT_EQ(demand["modules"][0]["module"], "module.1");
  EXPECT_EQ(demand["modules"][0]["bytes"], 10 * kMiB);
  EXPECT_EQ(demand["modules"][1]["module"], "module.2");
  EXPECT_EQ(demand["modules"][1]["bytes"], 10 * kMiB);
}

// The demo's job names who holds each tensor as a prediction would: its OOM names the request
// and every pinning block by role and module.
TEST(BlockContextTest, TheDemoNamesModules) {
  const testing::CommandRun run = testing::Fragscope({"demo", "--no-html", "--json", "-"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  const nlohmann::json& oom = j["ranks"][0]["ooms"]["explained"][0];
  EXPECT_EQ(oom["request_context"]["module"], "GPT2LMHeadModel");
  EXPECT_EQ(oom["request_context"]["op"], "aten::_to_copy");
  ASSERT_FALSE(oom["pinning"].empty());
  for (const nlohmann::json& p : oom["pinning"]) {
    EXPECT_NE(p["module"], "") << p.dump();
    EXPECT_NE(p["role"], "unknown") << p.dump();
  }
  EXPECT_EQ(oom["held_by_module"][0]["module"], "lm_head");
}

TEST(BlockContextTest, ALogWithoutContextsSaysNothingOfThem) {
  TraceBuilder t(64 * kMiB);
  t.Alloc(40 * kMiB);
  t.AllocExpectOom(40 * kMiB);
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({t.Finish()}, {.run_sweep = false});
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::ordered_json j = JsonReport(*report, {});
  const auto& oom = j["ranks"][0]["ooms"]["explained"][0];
  EXPECT_TRUE(oom["request_context"].is_null());
  EXPECT_TRUE(oom["held_by_module"].empty());
  std::ostringstream text;
  RenderTextReport(*report, {}, text);
  EXPECT_THAT(text.str(), ::testing::Not(HasSubstr("held by module")));
  EXPECT_THAT(text.str(), ::testing::Not(HasSubstr("requested by")));
}

// A log whose context records are damaged: refused, naming the record and what is wrong.
TEST(BlockContextTest, DanglingIdsTornStringsAndRedefinitionsAreErrorsNamingTheRecord) {
  struct Case {
    const char* name;
    std::function<void(TraceBuilder&)> write;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"alloc names an undefined context",
       [](TraceBuilder& t) {
         t.SetContext(7);
         t.Alloc(kMiB);
       },
       "names context 7, which no context record before it defines"},
      {"context names an undefined string",
       [](TraceBuilder& t) { t.DefineContext({.id = 1, .module = 9}); },
       "context 1 names string 9, which no string record before it defines"},
      {"string defined twice",
       [](TraceBuilder& t) {
         t.DefineString(1, "a");
         t.DefineString(1, "b");
       },
       "string 1 is defined twice"},
      {"context defined twice",
       [](TraceBuilder& t) {
         t.DefineContext({.id = 2});
         t.DefineContext({.id = 2});
       },
       "context 2 is defined twice"},
      {"a tag names an undefined context",
       [](TraceBuilder& t) {
         const DevicePtr p = t.Alloc(kMiB);
         t.writer().Tag(p, AllocationRole::kWeights, 0, 5);
       },
       "names context 5, which no context record before it defines"},
  };
  for (const Case& c : cases) {
    TraceBuilder t(64 * kMiB, "", "damaged.fslog");
    c.write(t);
    const std::string path = t.Finish();
    absl::StatusOr<AnalysisReport> report = AnalyzeTraces({path}, {.run_sweep = false});
    ASSERT_FALSE(report.ok()) << c.name;
    EXPECT_THAT(std::string(report.status().message()), HasSubstr(c.error)) << c.name;
    EXPECT_THAT(std::string(report.status().message()), HasSubstr("damaged.fslog")) << c.name;
    EXPECT_THAT(std::string(report.status().message()), ::testing::ContainsRegex("record [0-9]+"))
        << c.name;
  }
}

TEST(BlockContextTest, ATornStringIsAnError) {
  TraceBuilder t(64 * kMiB, "", "torn.fslog");
  t.DefineString(1, std::string(200, 'm'));  // a first record and 3 continuation records
  const std::string path = t.Finish();
  // The last continuation made a marker, and the chunk sealed again (its CRCs rewritten).
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), {});
  }
  const size_t first = bytes.find("mmmm") - kStringFirstTextOffset;
  std::vector<LogRecord> records(4);
  std::memcpy(records.data(), bytes.data() + first, 4 * kRecordBytes);
  ASSERT_EQ(records[3].kind, kRecordKindString);
  records[3].kind = static_cast<uint8_t>(EventKind::kMarker);
  records[3].flags = 0;
  records[3].aux = 0;
  ChunkHeader header;
  std::memcpy(&header, bytes.data() + first - kChunkHeaderBytes, kChunkHeaderBytes);
  ASSERT_EQ(header.record_count, 4u);
  SealChunk(header.record_count, header.first_sequence, records.data(), &header);
  std::memcpy(bytes.data() + first - kChunkHeaderBytes, &header, kChunkHeaderBytes);
  std::memcpy(bytes.data() + first, records.data(), 4 * kRecordBytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({path}, {.run_sweep = false});
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("bad string record 0: string 1 is torn: 176 of its 200"));
}

TEST(BlockContextTest, HostileStringsAreEscapedInTheText) {
  TraceBuilder t(64 * kMiB, "", "hostile.fslog");
  t.DefineString(1, "model.\x1b[2J<b>\u202e");
  t.DefineContext({.id = 1, .role = 6, .module = 1});
  t.SetContext(1);
  t.Alloc(40 * kMiB);
  t.AllocExpectOom(40 * kMiB);
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({t.Finish()}, {.run_sweep = false});
  ASSERT_TRUE(report.ok()) << report.status();
  std::ostringstream text;
  RenderTextReport(*report, {}, text);
  EXPECT_THAT(text.str(), ::testing::Not(HasSubstr("\x1b")));
  EXPECT_THAT(text.str(), HasSubstr("model.\\x1b[2J<b>\\xe2\\x80\\xae"));
}

}  // namespace
}  // namespace fragscope
