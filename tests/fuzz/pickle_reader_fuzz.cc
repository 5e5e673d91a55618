// libFuzzer target for the pickle codec and the snapshot model (analysis/sources/pickle/,
// analysis/sources/pytorch_snapshot.h).
//
// Properties checked on every input:
//   - ReadPickle never crashes, hangs or allocates out of proportion to the input;
//   - whatever it accepts, WritePickle re-encodes (protocols 2 and 4) into bytes that ReadPickle
//     decodes to an equal value: the reader and the writer agree;
//   - SnapshotFromPickle on any decoded value never crashes, and an imported snapshot exports;
//   - the streaming reader replay uses (ReadPyTorchSnapshotBytesForReplay) never crashes, and
//     reads what the whole-file reader reads: the same segments and the same typed trace entries,
//     whose frames it drops but whose call sites it keeps (the same text, entry by entry).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "allocator/check.h"
#include "analysis/sources/call_site_text.h"
#include "analysis/sources/pickle/pickle_reader.h"
#include "analysis/sources/pickle/pickle_writer.h"
#include "analysis/sources/pytorch_snapshot.h"

namespace {

// An entry's call site, from its frames (a whole read) or the one a streamed read kept.
std::string SiteText(const fragscope::PyTorchSnapshot& snapshot,
                     const fragscope::SnapshotTraceEntry& entry) {
  if (entry.frames != nullptr) return fragscope::CallSiteText(*entry.frames);
  const uint32_t id = entry.call_site;
  FRAGSCOPE_CHECK(id <= snapshot.call_sites.size());
  return id == 0 ? "" : snapshot.call_sites[id - 1];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragscope;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<PyTorchSnapshot> whole = ReadPyTorchSnapshotBytes(input, "fuzz");
  const absl::StatusOr<PyTorchSnapshot> streamed = ReadPyTorchSnapshotBytesForReplay(input, "fuzz");
  if (whole.ok()) {
    FRAGSCOPE_CHECK(streamed.ok());
    FRAGSCOPE_CHECK(streamed->segments.size() == whole->segments.size());
    FRAGSCOPE_CHECK(streamed->device_traces.size() == whole->device_traces.size());
    for (size_t d = 0; d < whole->device_traces.size(); ++d) {
      const auto& a = whole->device_traces[d];
      const auto& b = streamed->device_traces[d];
      FRAGSCOPE_CHECK(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        FRAGSCOPE_CHECK(a[i].action == b[i].action && a[i].addr == b[i].addr &&
                        a[i].size == b[i].size && a[i].stream == b[i].stream &&
                        a[i].pool_id == b[i].pool_id);
        FRAGSCOPE_CHECK(SiteText(*whole, a[i]) == SiteText(*streamed, b[i]));
      }
    }
  }

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
