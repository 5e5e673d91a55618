// SlotRing: the bounded single-producer/single-consumer queue of chunk-buffer indices through
// which the event-log writer's buffers move between the producer and the background thread
// (see Note [Event log buffering] in fslog_writer.h). No mutex: a push or pop is one release
// store.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fragscope::internal {

class SlotRing {
 public:
  // REQUIRES: called once, before any other use; `capacity` >= the number of indices ever queued
  // at once (the writer's buffer count), so Push never finds the ring full.
  void Init(size_t capacity) {
    capacity_ = capacity;
    items_ = std::make_unique<std::atomic<uint32_t>[]>(capacity);
  }

  bool Empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

  // Producer side.
  void Push(uint32_t slot) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    items_[tail % capacity_].store(slot, std::memory_order_relaxed);
    tail_.store(tail + 1, std::memory_order_release);
  }

  // Consumer side: the oldest entry, left in the ring; false if empty.
  bool Peek(uint32_t* slot) const {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_.load(std::memory_order_acquire)) return false;
    *slot = items_[head % capacity_].load(std::memory_order_relaxed);
    return true;
  }

  // Consumer side: removes the entry Peek returned.
  void Pop() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // For the fatal-signal handler: up to `max` entries in FIFO order, racy but bounded.
  // Async-signal-safe.
  size_t Snapshot(uint32_t* out, size_t max) const {
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    size_t n = 0;
    for (uint64_t i = head; i < tail && n < max && n < capacity_; ++i) {
      out[n++] = items_[i % capacity_].load(std::memory_order_relaxed);
    }
    return n;
  }

 private:
  std::unique_ptr<std::atomic<uint32_t>[]> items_;
  size_t capacity_ = 0;
  std::atomic<uint64_t> head_{0};
  std::atomic<uint64_t> tail_{0};
};

}  // namespace fragscope::internal
