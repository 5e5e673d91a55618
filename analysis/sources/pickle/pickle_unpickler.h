// Unpickler: the pickle machine behind ReadPickle and ReadPickleStreaming (pickle_reader.h).
// Internal to the reader: its opcodes are in pickle_reader.cc, the streaming of one list's
// elements in pickle_stream.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "analysis/sources/pickle/pickle_arena.h"
#include "analysis/sources/pickle/pickle_opcodes.h"
#include "analysis/sources/pickle/pickle_reader.h"

namespace fragscope::pickle::internal {

// Runs the pickle machine (stack, MARKs, memo) over a PickleArena, then finalizes the arena. As
// StreamContents, it lets a stream consumer read the arena's containers (pickle_stream.cc).
class Unpickler final : public StreamContents {
 public:
  Unpickler(std::string_view data, const PickleReadOptions& options)
      : data_(data), options_(options) {}

  absl::StatusOr<PickleValue> Run();

 private:
  absl::Status Step();
  absl::Status Err(std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat("pickle: %s (opcode %s 0x%02x at offset %d)",
                                                      message, OpcodeName(opcode_), opcode_,
                                                      op_offset_));
  }
  absl::Status Limit(std::string_view message) const {
    return absl::ResourceExhaustedError(
        absl::StrFormat("pickle: %s at offset %d", message, op_offset_));
  }

  // Reading operands. Each checks the remaining length first.
  absl::StatusOr<std::string_view> Take(uint64_t n);
  absl::StatusOr<uint64_t> ReadUnsigned(size_t width);

  absl::Status Push(Slot slot);
  size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  absl::Status NeedAboveFence(size_t n) const;
  absl::StatusOr<size_t> PopMark();
  absl::Status Memoize(uint64_t index);
  absl::Status MemoGet(uint64_t index);
  absl::StatusOr<Container*> Target(size_t stack_index, PickleKind kind);
  absl::Status CheckKey(const Slot& key) const;
  absl::Status BuildTuple(size_t first);

  std::string_view data_;
  const PickleReadOptions& options_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  uint8_t opcode_ = 0;
  int protocol_ = 0;
  bool stopped_ = false;

  // Streaming (ReadPickleStreaming); consumer_ is null otherwise. Roles steer which containers
  // are streamed; what is streamed is decided where elements are appended, and checked.
  void AssignRole(const Slot& c);
  bool Open(StreamRole role) const;
  absl::Status StreamElements(Container& inner, size_t first);
  void NoteAttach(bool to_outer, size_t first);
  StreamValue View(const Slot& slot) const;
  absl::Status Layout(std::string_view message) const {
    return absl::FailedPreconditionError(absl::StrFormat("pickle: %s (opcode %s at offset %d)",
                                                         message, OpcodeName(opcode_), op_offset_));
  }

 public:
  void SetStream(std::string_view key, PickleListConsumer* consumer) {
    stream_key_ = key;
    consumer_ = consumer;
  }
  // After Run(): the inner lists the result holds, by identity.
  absl::StatusOr<absl::flat_hash_map<const void*, size_t>> StreamedLists() const;

  bool Items(const StreamValue& value, std::vector<StreamValue>* items) override;
  bool Note(const StreamValue& value, uint32_t note) override;

 private:
  std::vector<Slot> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  ChunkedVector<Slot> memo_;
  internal::PickleArena arena_;

  std::string_view stream_key_;
  PickleListConsumer* consumer_ = nullptr;
  bool root_seen_ = false;
  std::optional<uint32_t> root_;   // the root dict's container index
  std::optional<uint32_t> outer_;  // the streamed list's
  struct Inner {
    uint32_t container = 0;
    size_t streamed = 0;     // elements handed to the consumer
    size_t attached = 0;     // times appended to the outer list
    bool elsewhere = false;  // also put in another container
  };
  std::vector<Inner> inner_;
  std::vector<std::pair<StreamValue, StreamValue>> scratch_;
  size_t next_progress_ = 0;
};

}  // namespace fragscope::pickle::internal
