#include "analysis/sources/pickle/pickle_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "allocator/check.h"
#include "analysis/sources/pickle/pickle_opcodes.h"

namespace fragscope::pickle {
namespace {

// CPython's framing constants (Lib/pickle.py _Framer).
constexpr size_t kFrameSizeTarget = 64 * 1024;
constexpr size_t kFrameSizeMin = 4;
// CPython's _BATCHSIZE: APPENDS/SETITEMS carry at most this many items.
constexpr size_t kBatchSize = 1000;

class Pickler {
 public:
  explicit Pickler(const PickleWriteOptions& options) : options_(options) {}

  absl::StatusOr<std::string> Run(const PickleValue& root) {
    if (options_.protocol < 2 || options_.protocol > 5) {
      return absl::InvalidArgumentError(
          absl::StrCat("pickle writer: protocol ", options_.protocol, " is not 2-5"));
    }
    framed_ = options_.protocol >= 4;
    out_.push_back(static_cast<char>(op::kProto));
    out_.push_back(static_cast<char>(options_.protocol));
    FRAGSCOPE_RETURN_IF_ERROR(Save(root, 0));
    Op(op::kStop);
    CommitFrame();
    return std::move(out_);
  }

 private:
  std::string& sink() { return framed_ ? frame_ : out_; }
  void Op(uint8_t opcode) { sink().push_back(static_cast<char>(opcode)); }
  void Le(uint64_t value, size_t width) {
    for (size_t i = 0; i < width; ++i) sink().push_back(static_cast<char>(value >> (8 * i)));
  }
  void CommitFrame() {
    if (!framed_ || frame_.empty()) return;
    if (frame_.size() >= kFrameSizeMin) {
      out_.push_back(static_cast<char>(op::kFrame));
      for (size_t i = 0; i < 8; ++i) out_.push_back(static_cast<char>(frame_.size() >> (8 * i)));
    }
    out_.append(frame_);
    frame_.clear();
  }

  absl::Status Save(const PickleValue& v, size_t depth);
  void SaveInt(int64_t value);
  absl::Status SaveBytesLike(const PickleValue& v);
  absl::Status SaveContainer(const PickleValue& v, size_t depth);
  // Memo: puts the value on top of the stack into the next memo slot and returns the slot.
  absl::StatusOr<uint32_t> Put();
  void Get(uint32_t index);

  const PickleWriteOptions& options_;
  bool framed_ = false;
  std::string out_;
  std::string frame_;
  uint64_t memo_size_ = 0;
  // Keys point into the tree being written, which outlives the Pickler.
  absl::flat_hash_map<std::pair<PickleKind, std::string_view>, uint32_t> string_memo_;
  absl::flat_hash_map<const void*, uint32_t> shared_memo_;
};

absl::StatusOr<uint32_t> Pickler::Put() {
  if (memo_size_ >= std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError("pickle writer: more than 2^32 memo entries");
  }
  const auto index = static_cast<uint32_t>(memo_size_++);
  if (options_.protocol >= 4) {
    Op(op::kMemoize);
  } else if (index < 256) {
    Op(op::kBinPut);
    Le(index, 1);
  } else {
    Op(op::kLongBinPut);
    Le(index, 4);
  }
  return index;
}

void Pickler::Get(uint32_t index) {
  if (index < 256) {
    Op(op::kBinGet);
    Le(index, 1);
  } else {
    Op(op::kLongBinGet);
    Le(index, 4);
  }
}

void Pickler::SaveInt(int64_t value) {
  if (value >= 0 && value <= 0xff) {
    Op(op::kBinInt1);
    Le(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value <= 0xffff) {
    Op(op::kBinInt2);
    Le(static_cast<uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<int32_t>::min() &&
             value <= std::numeric_limits<int32_t>::max()) {
    Op(op::kBinInt);
    Le(static_cast<uint32_t>(value), 4);
  } else {
    // Shortest two's complement, as pickle.encode_long.
    const auto bits = static_cast<uint64_t>(value);
    size_t n = 8;
    while (n > 1) {
      const auto top = static_cast<uint8_t>(bits >> (8 * (n - 1)));
      const bool next_negative = ((bits >> (8 * (n - 1) - 1)) & 1) != 0;
      if ((top == 0x00 && !next_negative) || (top == 0xff && next_negative)) {
        --n;
      } else {
        break;
      }
    }
    Op(op::kLong1);
    Le(n, 1);
    Le(bits, n);
  }
}

absl::Status Pickler::SaveBytesLike(const PickleValue& v) {
  const std::string& s = v.string_value();
  const auto key = std::make_pair(v.kind(), std::string_view(s));
  if (auto it = string_memo_.find(key); it != string_memo_.end()) {
    Get(it->second);
    return absl::OkStatus();
  }
  const bool p4 = options_.protocol >= 4;
  if (v.kind() == PickleKind::kBigInt) {
    if (s.size() > 0xff) {
      return absl::InvalidArgumentError("pickle writer: int wider than 255 bytes");
    }
    Op(op::kLong1);
    Le(s.size(), 1);
    sink().append(s);
    return absl::OkStatus();  // ints are not memoized, as in Python
  }
  if (v.kind() == PickleKind::kString) {
    if (p4 && s.size() <= 0xff) {
      Op(op::kShortBinUnicode);
      Le(s.size(), 1);
    } else if (s.size() <= 0xffffffff) {
      Op(op::kBinUnicode);
      Le(s.size(), 4);
    } else if (p4) {
      Op(op::kBinUnicode8);
      Le(s.size(), 8);
    } else {
      return absl::InvalidArgumentError("pickle writer: str of 4 GiB or more needs protocol 4");
    }
  } else {
    if (options_.protocol < 3) {
      return absl::InvalidArgumentError("pickle writer: bytes need protocol 3 or later");
    }
    if (s.size() <= 0xff) {
      Op(op::kShortBinBytes);
      Le(s.size(), 1);
    } else if (s.size() <= 0xffffffff) {
      Op(op::kBinBytes);
      Le(s.size(), 4);
    } else if (p4) {
      Op(op::kBinBytes8);
      Le(s.size(), 8);
    } else {
      return absl::InvalidArgumentError("pickle writer: bytes of 4 GiB or more need protocol 4");
    }
  }
  sink().append(s);
  FRAGSCOPE_ASSIGN_OR_RETURN(const uint32_t index, Put());
  string_memo_.emplace(key, index);
  return absl::OkStatus();
}

absl::Status Pickler::Save(const PickleValue& v, size_t depth) {
  if (framed_ && frame_.size() >= kFrameSizeTarget) CommitFrame();
  switch (v.kind()) {
    case PickleKind::kNone:
      Op(op::kNone);
      return absl::OkStatus();
    case PickleKind::kBool:
      Op(v.bool_value() ? op::kNewTrue : op::kNewFalse);
      return absl::OkStatus();
    case PickleKind::kInt:
      SaveInt(v.int_value());
      return absl::OkStatus();
    case PickleKind::kFloat: {
      Op(op::kBinFloat);
      const auto bits = std::bit_cast<uint64_t>(v.float_value());
      for (int i = 7; i >= 0; --i) sink().push_back(static_cast<char>(bits >> (8 * i)));
      return absl::OkStatus();
    }
    case PickleKind::kBigInt:
    case PickleKind::kString:
    case PickleKind::kBytes:
      return SaveBytesLike(v);
    case PickleKind::kList:
    case PickleKind::kTuple:
    case PickleKind::kDict:
      break;
  }
  return SaveContainer(v, depth);
}

absl::Status Pickler::SaveContainer(const PickleValue& v, size_t depth) {
  if (depth >= options_.max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("pickle writer: containers nest deeper than ", options_.max_depth));
  }
  // Only containers referenced from several places can be met twice; memoize just those.
  const bool shared = v.use_count() > 1;
  if (shared) {
    if (auto it = shared_memo_.find(v.identity()); it != shared_memo_.end()) {
      Get(it->second);
      return absl::OkStatus();
    }
  }
  if (v.kind() == PickleKind::kTuple) {
    const auto& items = v.items();
    if (items.empty()) {
      Op(op::kEmptyTuple);
    } else {
      if (items.size() > 3) Op(op::kMark);
      for (const auto& item : items) FRAGSCOPE_RETURN_IF_ERROR(Save(item, depth + 1));
      Op(items.size() > 3 ? op::kTuple : static_cast<uint8_t>(op::kTuple1 + items.size() - 1));
    }
    if (shared) {
      FRAGSCOPE_ASSIGN_OR_RETURN(shared_memo_[v.identity()], Put());
    }
    return absl::OkStatus();
  }
  const bool dict = v.kind() == PickleKind::kDict;
  Op(dict ? op::kEmptyDict : op::kEmptyList);
  if (shared) {
    FRAGSCOPE_ASSIGN_OR_RETURN(shared_memo_[v.identity()], Put());
  }
  const size_t n = dict ? v.entries().size() : v.items().size();
  for (size_t begin = 0; begin < n; begin += kBatchSize) {
    const size_t end = std::min(n, begin + kBatchSize);
    if (end - begin > 1) Op(op::kMark);
    for (size_t i = begin; i < end; ++i) {
      if (dict) {
        FRAGSCOPE_RETURN_IF_ERROR(Save(v.entries()[i].first, depth + 1));
        FRAGSCOPE_RETURN_IF_ERROR(Save(v.entries()[i].second, depth + 1));
      } else {
        FRAGSCOPE_RETURN_IF_ERROR(Save(v.items()[i], depth + 1));
      }
    }
    if (end - begin > 1) {
      Op(dict ? op::kSetItems : op::kAppends);
    } else {
      Op(dict ? op::kSetItem : op::kAppend);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> WritePickle(const PickleValue& value,
                                        const PickleWriteOptions& options) {
  return Pickler(options).Run(value);
}

absl::Status WritePickleFile(const PickleValue& value, const std::string& path,
                             const PickleWriteOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const std::string bytes, WritePickle(value, options));
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  // errno is read right after the call that failed.
  int error = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size() || std::fflush(out) != 0) {
    error = errno;
  }
  if (std::fclose(out) != 0 && error == 0) error = errno;
  if (error != 0) {
    return absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace fragscope::pickle
