// TraceLookahead (analysis/replay/replay_lookahead.h): events in order, Peek at any depth, events
// that stay put until passed, and a source error held back until the Next() that reaches it.
#include "analysis/replay/replay_lookahead.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

// Events with index 0, 1, ..., count - 1, then the end, or an error after `error_after` events.
class CountingSource final : public TraceSource {
 public:
  CountingSource(uint64_t count, uint64_t error_after = UINT64_MAX)
      : count_(count), error_after_(error_after) {}

  absl::StatusOr<bool> Next(TraceEvent* event) override {
    ++next_calls_;
    if (next_ == error_after_) return absl::DataLossError("corrupt chunk at offset 4096");
    if (next_ == count_) return false;
    event->index = next_++;
    return true;
  }
  absl::StatusOr<size_t> NextBatch(std::span<TraceEvent* const> events) override {
    ++batch_calls_;
    return TraceSource::NextBatch(events);
  }
  uint64_t next_calls() const { return next_calls_; }
  uint64_t batch_calls() const { return batch_calls_; }

 private:
  uint64_t count_;
  uint64_t error_after_;
  uint64_t next_ = 0;
  uint64_t next_calls_ = 0;
  uint64_t batch_calls_ = 0;
};

TEST(TraceLookaheadTest, DeliversEveryEventInOrderReadInBatches) {
  CountingSource source(1000);
  TraceLookahead events(source);
  for (uint64_t i = 0; i < 1000; ++i) {
    const TraceEvent* event = events.Next();
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->index, i);
    const TraceEvent* next = events.Peek(1);
    if (i + 1 < 1000) {
      ASSERT_NE(next, nullptr);
      EXPECT_EQ(next->index, i + 1);
    } else {
      EXPECT_EQ(next, nullptr);
    }
    EXPECT_EQ(event->index, i);  // reading ahead left the current event alone
  }
  EXPECT_EQ(events.Next(), nullptr);
  EXPECT_TRUE(events.status().ok());
  // A virtual call per batch, not per event.
  EXPECT_LE(source.batch_calls(), 1000 / TraceLookahead::kMinSlots + 40);
}

TEST(TraceLookaheadTest, DeepPeeksGrowTheRingAndEventsStayPut) {
  CountingSource source(5000);
  TraceLookahead events(source);
  ASSERT_NE(events.Next(), nullptr);  // event 0 is current
  const TraceEvent* p10 = events.Peek(10);
  const TraceEvent* p3000 = events.Peek(3000);  // far past the ring's first size
  ASSERT_NE(p10, nullptr);
  ASSERT_NE(p3000, nullptr);
  EXPECT_EQ(p10->index, 10u);
  EXPECT_EQ(p3000->index, 3000u);
  TraceEvent* event = nullptr;
  for (uint64_t i = 1; i <= 10; ++i) {
    event = events.Next();
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->index, i);
  }
  EXPECT_EQ(event, p10);  // the peeked event itself, not a copy
  EXPECT_EQ(events.Peek(2990), p3000);
  for (uint64_t i = 11; i < 5000; ++i) {
    event = events.Next();
    ASSERT_NE(event, nullptr);
    ASSERT_EQ(event->index, i);
  }
  EXPECT_EQ(events.Next(), nullptr);
  EXPECT_TRUE(events.status().ok());
}

TEST(TraceLookaheadTest, AnErrorWaitsForTheNextThatReachesIt) {
  for (uint64_t error_after : {0u, 1u, 63u, 64u, 65u, 200u}) {
    SCOPED_TRACE(error_after);
    CountingSource source(1000, error_after);
    TraceLookahead events(source);
    if (error_after > 0) {
      EXPECT_EQ(events.Peek(error_after + 5), nullptr);  // reads up to the error
    }
    for (uint64_t i = 0; i < error_after; ++i) {
      const TraceEvent* event = events.Next();
      ASSERT_NE(event, nullptr);
      EXPECT_EQ(event->index, i);  // every event before the error is still delivered
    }
    EXPECT_EQ(events.Next(), nullptr);
    EXPECT_EQ(events.status(), absl::DataLossError("corrupt chunk at offset 4096"));
    EXPECT_EQ(events.Next(), nullptr);  // and stays
  }
}

}  // namespace
}  // namespace fragscope
