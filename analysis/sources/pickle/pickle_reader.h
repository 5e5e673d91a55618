// A strict decoder for the pickles Python and LibTorch write for plain data.
//
// ReadPickle decodes a protocol 2-5 pickle whose objects are None, bool, int, float, str, bytes,
// list, tuple and dict - what torch.cuda.memory._dump_snapshot (Python's pickle.dump) and
// torch::cuda::_memory_snapshot_pickled (LibTorch's jit Pickler) produce. It never imports or
// calls anything: GLOBAL, STACK_GLOBAL, REDUCE, BUILD and every other opcode outside the list in
// README.md is rejected with an error naming the opcode and its byte offset.
//
// Any input is safe: every length is checked against the bytes that remain before anything is
// allocated, the stack, the memo and the nesting depth are bounded, memo references are checked,
// containers that contain themselves are rejected, and the work is linear in the input size
// (shared subtrees are kept shared, never copied). Errors are InvalidArgument (malformed or
// unsupported input) or ResourceExhausted (a limit below was hit), and name the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/sources/pickle/pickle_value.h"

namespace fragscope::pickle {

struct PickleReadOptions {
  // Largest input accepted. Snapshots with long traces reach gigabytes.
  size_t max_input_bytes = size_t{16} << 30;
  // Deepest nesting of containers in the result (a snapshot nests 6 deep).
  size_t max_depth = 200;
  // Most values on the unpickling stack at once, and most MARKs open at once.
  size_t max_stack = size_t{1} << 26;
  // Accept bytes after the STOP opcode (Python's pickle.loads ignores them).
  bool allow_trailing_bytes = false;
  // Called with the offset reached, every `progress_bytes` of input (e.g. to release the pages
  // behind it; strings met earlier may still be read again).
  std::function<void(size_t offset)> progress;
  size_t progress_bytes = size_t{64} << 20;
};

// Decodes one pickle that must fill `data` (unless allow_trailing_bytes).
absl::StatusOr<PickleValue> ReadPickle(std::string_view data,
                                       const PickleReadOptions& options = {});

// Reads the file and decodes it; the error names the path.
absl::StatusOr<PickleValue> ReadPickleFile(const std::string& path,
                                           const PickleReadOptions& options = {});

// Streaming: for pickles too large to hold as a tree, whose bulk is one list of lists under a
// key of the root dict (a snapshot's 'device_traces'). The elements of those inner lists are
// handed to a consumer as they are appended, and emptied, instead of being kept: memory then
// grows with the rest of the pickle and the memo, not with the elements.
//
// A value as the consumer sees it: scalars and strings by value, containers by kind, with a
// handle to read their items through StreamContents.
struct StreamValue {
  PickleKind kind = PickleKind::kNone;
  int64_t int_value = 0;     // kInt, kBool (0 or 1)
  double float_value = 0.0;  // kFloat
  std::string_view text;     // kString, kBytes: valid during the call only
  // kTuple of two ints (a snapshot's pool ids): the two.
  std::optional<std::pair<int64_t, int64_t>> int_pair;
  // kList, kTuple, kDict: which container it is, the same for every reference to it (a memo
  // reference) in one read; 0 for other kinds.
  uint32_t container = 0;
  // What the consumer noted on that container (StreamContents::Note); 0: nothing.
  uint32_t note = 0;
};
using StreamItems = std::span<const std::pair<StreamValue, StreamValue>>;

// What a consumer may read below an element's own items (a snapshot's trace entry: its frames
// list, and the frame dicts in it), and remember of a container across elements: PyTorch shares
// one frames list among the entries of one allocation, and one frame dict among every stack that
// passes through it, as memo references.
class StreamContents {
 public:
  // The items of the container `value` into *items (a list's or tuple's elements; a dict's keys
  // and values alternating, in SETITEM order), as views valid during the consumer's call. False
  // (none) for a value that is no container, or a container already streamed and emptied (one
  // made inside an earlier element: what the consumer noted on it is what remains). A container
  // read so may not change afterwards: a later APPEND or SETITEM on it stops the read with
  // FailedPrecondition, as the value the consumer took from it would be stale.
  virtual bool Items(const StreamValue& value, std::vector<StreamValue>* items) = 0;
  // Notes `note` on the container `value`: every later view of it carries it (StreamValue::note),
  // even once it was streamed and emptied. False, noting nothing, for a value that is no container
  // or is one of the streamed lists.
  virtual bool Note(const StreamValue& value, uint32_t note) = 0;

 protected:
  ~StreamContents() = default;
};

class PickleListConsumer {
 public:
  virtual ~PickleListConsumer() = default;
  // Element `index` of inner list `list` (inner lists are numbered as they are created). A dict
  // comes with its keys and values in SETITEM order (a repeated key: the last one counts, as in
  // Python); any other value with no items. `contents` reads deeper, during the call. An error
  // stops the read and is returned by it.
  virtual absl::Status Element(size_t list, size_t index, const StreamValue& element,
                               StreamItems items, StreamContents& contents) = 0;
};

struct StreamedPickle {
  PickleValue root;  // the streamed inner lists are empty lists in it
  // The inner lists that `root` holds, by PickleValue::identity(), to their ordinals.
  absl::flat_hash_map<const void*, size_t> lists;
};

// The root must be a dict; its value under `key` is streamed when it is a list created as that
// value, and so are the lists created as its elements. Python's semantics hold (a memo reference
// sees a list as it is), except that an element, and a container created inside it, may not be
// referenced again once streamed: such pickles (none that Python or LibTorch write for a
// snapshot) fail with FailedPrecondition, and can be read whole with ReadPickle.
absl::StatusOr<StreamedPickle> ReadPickleStreaming(std::string_view data, std::string_view key,
                                                   PickleListConsumer& consumer,
                                                   const PickleReadOptions& options = {});

}  // namespace fragscope::pickle
