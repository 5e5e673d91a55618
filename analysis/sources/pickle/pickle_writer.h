// Encodes a PickleValue as a pickle that Python's pickle.load and PyTorch's memory_viz (both
// `python -m torch.cuda._memory_viz` and the JavaScript unpickler of pytorch.org/memory_viz) read.
//
// Output follows what CPython's pickler writes for the same objects: protocol 4 (the default)
// with FRAMEs of about 64 KiB, SHORT_BINUNICODE/BINUNICODE, MEMOIZE, BININT1/BININT2/BININT/LONG1,
// EMPTY_DICT + SETITEMS and EMPTY_LIST + APPENDS in batches of 1000, TUPLE1-3 or MARK + TUPLE.
// Protocol 2 (PROTO 2, BINPUT, BINUNICODE, no frames) is what LibTorch's jit Pickler writes.
//
// Sharing is preserved: a str is written once and referenced by BINGET afterwards, and a
// container that several places of the tree share is written once. So a snapshot whose trace
// entries share frames lists stays small.
//
// memory_viz's JavaScript unpickler knows no bytes opcodes: a tree meant for it must not contain
// bytes. Protocol 2 cannot express bytes without calling a global; WritePickle refuses them there.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/sources/pickle/pickle_value.h"

namespace fragscope::pickle {

struct PickleWriteOptions {
  // 2, 3, 4 or 5. Protocol 5 output equals protocol 4 output apart from the PROTO byte; the
  // memory_viz page of PyTorch 2.1-2.5 reads protocols 2-4 only.
  int protocol = 4;
  // Deepest nesting written; deeper trees are an error rather than a deep recursion.
  size_t max_depth = 200;
};

absl::StatusOr<std::string> WritePickle(const PickleValue& value,
                                        const PickleWriteOptions& options = {});

// Writes to `path` (replacing it); errors name the path.
absl::Status WritePickleFile(const PickleValue& value, const std::string& path,
                             const PickleWriteOptions& options = {});

}  // namespace fragscope::pickle
