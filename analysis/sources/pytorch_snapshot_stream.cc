// ReadPyTorchSnapshotForReplay: a snapshot read with bounded memory (pytorch_snapshot.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "analysis/sources/pickle/pickle_reader.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "analysis/sources/streamed_call_sites.h"

namespace fragscope {
namespace {

using pickle::PickleKind;
using pickle::StreamItems;
using pickle::StreamValue;

// Trace entries as the pickle appends them: the typed fields Importer::Trace reads
// (pytorch_snapshot.cc), with the same errors; of 'frames', the call site (streamed_call_sites.h).
class TraceEntries final : public pickle::PickleListConsumer {
 public:
  explicit TraceEntries(size_t max_items) : max_items_(max_items), sites_(max_items) {}

  absl::Status Element(size_t list, size_t index, const StreamValue& element, StreamItems items,
                       pickle::StreamContents& contents) override {
    if (list >= lists_.size()) lists_.resize(list + 1);
    std::vector<std::vector<SnapshotTraceEntry>>& chunks = lists_[list];
    if (chunks.empty() || chunks.back().size() == kChunk) chunks.emplace_back().reserve(kChunk);
    const std::string path = absl::StrFormat("device_traces[%d][%d]", list, index);
    if (element.kind != PickleKind::kDict) return TypeError(path, "dict", element);
    if (++items_ > max_items_) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: snapshot has more than %d trace entries", path, max_items_));
    }
    // A key given twice counts with its last value, as in Python.
    const StreamValue* fields[kFieldCount] = {};
    for (const auto& [key, value] : items) {
      if (key.kind != PickleKind::kString) continue;
      for (size_t f = 0; f < kFieldCount; ++f) {
        if (key.text == kFieldNames[f]) fields[f] = &value;
      }
    }
    SnapshotTraceEntry& entry = chunks.back().emplace_back();
    if (fields[kAction] == nullptr) return Missing(path, "action");
    FRAGSCOPE_ASSIGN_OR_RETURN(const std::string_view action, Str(path, "action", fields[kAction]));
    entry.action = TraceActionFromName(action);
    if (entry.action == TraceAction::kUnknown) entry.unknown_action = std::string(action);
    if (entry.action == TraceAction::kOom) {
      if (fields[kDeviceFree] == nullptr) return Missing(path, "device_free");
      FRAGSCOPE_ASSIGN_OR_RETURN(entry.device_free, UInt(path, "device_free", fields[kDeviceFree]));
    } else {
      if (fields[kAddr] == nullptr) return Missing(path, "addr");
      FRAGSCOPE_ASSIGN_OR_RETURN(entry.addr, UInt(path, "addr", fields[kAddr]));
    }
    if (fields[kSize] == nullptr) return Missing(path, "size");
    FRAGSCOPE_ASSIGN_OR_RETURN(entry.size, UInt(path, "size", fields[kSize]));
    if (fields[kStream] != nullptr) {
      FRAGSCOPE_ASSIGN_OR_RETURN(entry.stream, Int(path, "stream", fields[kStream]));
    }
    if (fields[kTimeUs] != nullptr) {
      FRAGSCOPE_ASSIGN_OR_RETURN(entry.time_us, Int(path, "time_us", fields[kTimeUs]));
    }
    if (fields[kFrames] != nullptr) {
      FRAGSCOPE_ASSIGN_OR_RETURN(entry.call_site, sites_.Site(path, *fields[kFrames], contents));
    }
    if (fields[kCompileContext] != nullptr) {
      FRAGSCOPE_ASSIGN_OR_RETURN(const std::string_view text,
                                 Str(path, "compile_context", fields[kCompileContext]));
      entry.compile_context.emplace(text);
    }
    if (fields[kUserMetadata] != nullptr) {
      FRAGSCOPE_ASSIGN_OR_RETURN(const std::string_view text,
                                 Str(path, "user_metadata", fields[kUserMetadata]));
      entry.user_metadata.emplace(text);
    }
    if (const StreamValue* pool = fields[kPoolId]) {
      if (!pool->int_pair.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.pool_id: expected a tuple of 2 ints, got %s", path,
                            pickle::PickleKindName(pool->kind)));
      }
      entry.pool_id = *pool->int_pair;
    }
    return absl::OkStatus();
  }

  size_t lists() const { return lists_.size(); }
  // The texts of the entries' call sites (SnapshotTraceEntry::call_site), moved out.
  std::vector<std::string> TakeCallSites() { return sites_.TakeTexts(); }
  // List `list`'s entries in one vector, built chunk by chunk so that the entries are held
  // about once, not twice as a growing vector's reallocation would hold them. `keep`: copy,
  // leaving them for another holder.
  std::vector<SnapshotTraceEntry> Take(size_t list, bool keep) {
    size_t n = 0;
    for (const auto& chunk : lists_[list]) n += chunk.size();
    std::vector<SnapshotTraceEntry> out;
    out.reserve(n);
    for (auto& chunk : lists_[list]) {
      if (keep) {
        out.insert(out.end(), chunk.begin(), chunk.end());
      } else {
        std::move(chunk.begin(), chunk.end(), std::back_inserter(out));
        std::vector<SnapshotTraceEntry>().swap(chunk);
      }
    }
    return out;
  }

 private:
  enum Field : size_t {
    kAction,
    kAddr,
    kDeviceFree,
    kSize,
    kStream,
    kTimeUs,
    kCompileContext,
    kUserMetadata,
    kPoolId,
    kFrames,
    kFieldCount
  };
  static constexpr std::string_view kFieldNames[kFieldCount] = {
      "action",          "addr",          "device_free", "size",  "stream", "time_us",
      "compile_context", "user_metadata", "pool_id",     "frames"};

  static absl::Status Missing(const std::string& path, std::string_view key) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: missing key '%s'", path, key));
  }
  static absl::Status TypeError(const std::string& path, std::string_view expected,
                                const StreamValue& v) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected %s, got %s", path, expected, pickle::PickleKindName(v.kind)));
  }
  static absl::StatusOr<int64_t> Int(const std::string& path, std::string_view key,
                                     const StreamValue* v) {
    if (v->kind == PickleKind::kBigInt) {
      return absl::OutOfRangeError(
          absl::StrFormat("%s.%s: int out of the 64-bit range", path, key));
    }
    if (v->kind != PickleKind::kInt)
      return TypeError(absl::StrFormat("%s.%s", path, key), "int", *v);
    return v->int_value;
  }
  static absl::StatusOr<uint64_t> UInt(const std::string& path, std::string_view key,
                                       const StreamValue* v) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const int64_t value, Int(path, key, v));
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.%s: expected an int >= 0, got %d", path, key, value));
    }
    return static_cast<uint64_t>(value);
  }
  static absl::StatusOr<std::string_view> Str(const std::string& path, std::string_view key,
                                              const StreamValue* v) {
    if (v->kind != PickleKind::kString)
      return TypeError(absl::StrFormat("%s.%s", path, key), "str", *v);
    return v->text;
  }

  // Entries per chunk: 2^18, ~55 MB, above glibc's largest mmap threshold (32 MiB), so that a
  // chunk freed by Take goes back to the system at once (a heap chunk would stay resident).
  static constexpr size_t kChunk = size_t{1} << 18;
  size_t max_items_;
  size_t items_ = 0;
  std::vector<std::vector<std::vector<SnapshotTraceEntry>>> lists_;  // list -> chunks
  StreamedCallSites sites_;
};

// Decodes `bytes`, streaming the traces' entries; `progress` sees the offset reached.
absl::StatusOr<PyTorchSnapshot> Decode(std::string_view bytes, const std::string& name,
                                       std::function<void(size_t)> progress) {
  const auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrFormat("%s: %s", name, s.message()));
  };
  // As ReadPyTorchSnapshotFile: at most one item per byte (real snapshots spend 15+ per item).
  SnapshotImportOptions import;
  import.max_items =
      std::min<size_t>(import.max_items, std::max<size_t>(size_t{1} << 16, bytes.size()));
  TraceEntries entries(import.max_items);
  pickle::PickleReadOptions options;
  options.progress = std::move(progress);
  absl::StatusOr<pickle::StreamedPickle> streamed =
      pickle::ReadPickleStreaming(bytes, "device_traces", entries, options);
  if (!streamed.ok() && absl::IsFailedPrecondition(streamed.status())) {
    // A layout that cannot be streamed (an entry referenced twice): read it whole.
    absl::StatusOr<pickle::PickleValue> root = pickle::ReadPickle(bytes);
    if (!root.ok()) return named(root.status());
    absl::StatusOr<PyTorchSnapshot> snapshot = SnapshotFromPickle(*root, import);
    if (!snapshot.ok()) return named(snapshot.status());
    return snapshot;
  }
  if (!streamed.ok()) return named(streamed.status());
  absl::StatusOr<PyTorchSnapshot> snapshot = SnapshotFromPickle(streamed->root, import);
  if (!snapshot.ok()) return named(snapshot.status());
  snapshot->call_sites = entries.TakeCallSites();
  // The streamed lists are empty in the tree: put their entries where the tree holds them.
  const pickle::PickleValue* traces =
      streamed->root.kind() == PickleKind::kDict ? streamed->root.Find("device_traces") : nullptr;
  if (traces == nullptr || traces->kind() != PickleKind::kList || streamed->lists.empty()) {
    return snapshot;
  }
  std::vector<size_t> uses(entries.lists(), 0);
  for (const pickle::PickleValue& trace : traces->items()) {
    auto it = streamed->lists.find(trace.identity());
    if (it != streamed->lists.end() && it->second < uses.size()) ++uses[it->second];
  }
  for (size_t d = 0; d < traces->items().size(); ++d) {
    auto it = streamed->lists.find(traces->items()[d].identity());
    if (it == streamed->lists.end() || it->second >= uses.size()) continue;
    // A list held twice (a memo reference) is copied for all but its last holder.
    snapshot->device_traces[d] = entries.Take(it->second, /*keep=*/--uses[it->second] > 0);
  }
  return snapshot;
}

}  // namespace

absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotBytesForReplay(std::string_view bytes,
                                                                  const std::string& name) {
  return Decode(bytes, name, nullptr);
}

absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotForReplay(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrFormat("cannot open %s: %s", path, std::strerror(errno)));
  }
  struct stat st = {};
  const bool sized = ::fstat(fd, &st) == 0;
  const int error = errno;
  if (!sized || st.st_size <= 0) {
    ::close(fd);
    return absl::DataLossError(absl::StrFormat("%s: cannot map the file: %s", path,
                                               sized ? "it is empty" : std::strerror(error)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot map %d bytes: %s", path, size, std::strerror(errno)));
  }
  ::madvise(base, size, MADV_SEQUENTIAL);
  // The pages behind the reader are released, so that the file does not stay resident; a page
  // read again (an early string) is read back from the file.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t released = 0;
  auto release = [&](size_t offset) {
    const size_t end = offset / page * page;
    if (end > released) {
      ::madvise(static_cast<char*>(base) + released, end - released, MADV_DONTNEED);
      released = end;
    }
  };
  absl::StatusOr<PyTorchSnapshot> snapshot =
      Decode(std::string_view(static_cast<const char*>(base), size), path, release);
  ::munmap(base, size);
  return snapshot;
}

}  // namespace fragscope
