// libFuzzer target for the pickle codec and the snapshot model (analysis/pickle/,
// analysis/pytorch_snapshot.h).
//
// Properties checked on every input:
//   - ReadPickle never crashes, hangs or allocates out of proportion to the input;
//   - whatever it accepts, WritePickle re-encodes (protocols 2 and 4) into bytes that ReadPickle
//     decodes to an equal value: the reader and the writer agree;
//   - SnapshotFromPickle on any decoded value never crashes, and an imported snapshot exports.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "allocator/check.h"
#include "analysis/pickle/pickle_reader.h"
#include "analysis/pickle/pickle_writer.h"
#include "analysis/pytorch_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<pickle::PickleValue> value = pickle::ReadPickle(input);
  if (!value.ok()) return 0;
  for (const int protocol : {2, 4}) {
    pickle::PickleWriteOptions options;
    options.protocol = protocol;
    const absl::StatusOr<std::string> bytes = pickle::WritePickle(*value, options);
    if (!bytes.ok()) {
      // Only bytes objects cannot be said in protocol 2.
      FRAGSCOPE_CHECK(protocol == 2);
      continue;
    }
    const absl::StatusOr<pickle::PickleValue> back = pickle::ReadPickle(*bytes);
    FRAGSCOPE_CHECK(back.ok());
    FRAGSCOPE_CHECK(*back == *value);
  }
  const absl::StatusOr<PyTorchSnapshot> snapshot = SnapshotFromPickle(*value);
  if (snapshot.ok()) {
    (void)CheckSnapshotInvariants(*snapshot);
    FRAGSCOPE_CHECK(pickle::WritePickle(SnapshotToPickle(*snapshot)).ok());
  }
  return 0;
}
