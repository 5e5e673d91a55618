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
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "analysis/pickle/pickle_value.h"

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
};

// Decodes one pickle that must fill `data` (unless allow_trailing_bytes).
absl::StatusOr<PickleValue> ReadPickle(std::string_view data,
                                       const PickleReadOptions& options = {});

// Reads the file and decodes it; the error names the path.
absl::StatusOr<PickleValue> ReadPickleFile(const std::string& path,
                                           const PickleReadOptions& options = {});

}  // namespace fragscope::pickle
