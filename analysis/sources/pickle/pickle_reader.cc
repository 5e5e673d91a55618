#include "analysis/sources/pickle/pickle_reader.h"

#include <cstdint>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "analysis/sources/pickle/pickle_arena.h"
#include "analysis/sources/pickle/pickle_opcodes.h"
#include "analysis/sources/pickle/pickle_unpickler.h"

namespace fragscope::pickle {
namespace internal {

absl::StatusOr<std::string_view> Unpickler::Take(uint64_t n) {
  if (n > data_.size() - pos_) {
    return Err(
        absl::StrFormat("truncated: operand needs %d bytes, %d remain", n, data_.size() - pos_));
  }
  std::string_view out = data_.substr(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return out;
}

absl::StatusOr<uint64_t> Unpickler::ReadUnsigned(size_t width) {
  FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view bytes, Take(width));
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

absl::Status Unpickler::Push(Slot slot) {
  if (stack_.size() >= options_.max_stack) {
    return Limit(absl::StrCat("stack deeper than ", options_.max_stack, " values"));
  }
  stack_.push_back(slot);
  return absl::OkStatus();
}

absl::Status Unpickler::NeedAboveFence(size_t n) const {
  if (stack_.size() - Fence() < n) {
    return Err(absl::StrCat("stack underflow: needs ", n, " values above the last MARK, has ",
                            stack_.size() - Fence()));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> Unpickler::PopMark() {
  if (marks_.empty()) return Err("no MARK to pop");
  const size_t mark = marks_.back();
  marks_.pop_back();
  return mark;
}

absl::Status Unpickler::Memoize(uint64_t index) {
  // Python and LibTorch number memo entries densely from 0; anything else is refused so that a
  // 4-byte index can never size the memo.
  if (index > memo_.size()) {
    return Err(
        absl::StrCat("memo index ", index, " skips ahead (memo has ", memo_.size(), " entries)"));
  }
  FRAGSCOPE_RETURN_IF_ERROR(NeedAboveFence(1));
  if (index == memo_.size()) {
    memo_.push_back(stack_.back());
  } else {
    memo_[static_cast<size_t>(index)] = stack_.back();
  }
  return absl::OkStatus();
}

absl::Status Unpickler::MemoGet(uint64_t index) {
  if (index >= memo_.size()) {
    return Err(absl::StrCat("memo index ", index, " was never stored (memo has ", memo_.size(),
                            " entries)"));
  }
  return Push(memo_[static_cast<size_t>(index)]);
}

absl::StatusOr<Container*> Unpickler::Target(size_t stack_index, PickleKind kind) {
  const Slot& slot = stack_[stack_index];
  if (slot.kind != kind) {
    return Err(absl::StrFormat("target is a %s, not a %s", PickleKindName(slot.kind),
                               PickleKindName(kind)));
  }
  Container& c = arena_.container(slot);
  if (c.role == StreamRole::kConsumed) {
    return Layout(absl::StrFormat("the %s created at offset %d was streamed, and is changed later",
                                  PickleKindName(kind), c.offset));
  }
  if (c.frozen) {
    return Layout(absl::StrFormat(
        "the %s created at offset %d was read with a streamed element, and is changed later",
        PickleKindName(kind), c.offset));
  }
  return &c;
}

absl::Status Unpickler::CheckKey(const Slot& key) const {
  switch (key.kind) {
    case PickleKind::kList:
    case PickleKind::kDict:
      return Err(absl::StrFormat("unhashable dict key of type %s", PickleKindName(key.kind)));
    case PickleKind::kTuple:
      return Err("tuple dict keys are not supported");
    default:
      return absl::OkStatus();
  }
}

absl::Status Unpickler::BuildTuple(size_t first) {
  if (consumer_ != nullptr) NoteAttach(/*to_outer=*/false, first);
  std::vector<Slot> items(stack_.begin() + static_cast<std::ptrdiff_t>(first), stack_.end());
  stack_.resize(first);
  FRAGSCOPE_ASSIGN_OR_RETURN(Slot tuple,
                             arena_.NewContainer(PickleKind::kTuple, std::move(items), op_offset_));
  return Push(tuple);
}

absl::StatusOr<PickleValue> Unpickler::Run() {
  if (data_.size() > options_.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("pickle: input of ", data_.size(),
                                                     " bytes exceeds the limit of ",
                                                     options_.max_input_bytes));
  }
  while (!stopped_) {
    if (pos_ >= data_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pickle: truncated: input ends at offset ", pos_, " before STOP"));
    }
    op_offset_ = pos_;
    opcode_ = static_cast<uint8_t>(data_[pos_++]);
    FRAGSCOPE_RETURN_IF_ERROR(Step());
    if (pos_ >= next_progress_ && options_.progress) {
      options_.progress(pos_);
      next_progress_ = pos_ + options_.progress_bytes;
    }
  }
  for (const Inner& inner : inner_) {
    // Its elements are gone: it may appear in the result only where they are put back.
    if (inner.streamed > 0 && (inner.attached == 0 || inner.elsewhere)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pickle: the list created at offset %d was streamed as an element of the '%s' list, "
          "and %s",
          arena_.container(Slot{PickleKind::kList, inner.container, 0}).offset, stream_key_,
          inner.elsewhere ? "is held elsewhere too" : "never became one"));
    }
  }
  if (stack_.size() != 1 || !marks_.empty()) {
    return Err(absl::StrCat("STOP with ", stack_.size(), " values on the stack and ", marks_.size(),
                            " open MARKs (expected one value)"));
  }
  if (pos_ != data_.size() && !options_.allow_trailing_bytes) {
    return Err(absl::StrCat(data_.size() - pos_, " bytes follow STOP"));
  }
  const Slot root = stack_.back();
  std::vector<Slot>().swap(stack_);
  memo_.clear();
  return arena_.Finalize(root, options_.max_depth);
}

absl::Status Unpickler::Step() {
  if (op_offset_ == 0 && opcode_ != op::kProto) {
    return Err("not a protocol 2-5 pickle: it must start with PROTO");
  }
  switch (opcode_) {
    case op::kProto: {
      if (op_offset_ != 0) return Err("PROTO after the start of the pickle");
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t version, ReadUnsigned(1));
      if (version < 2 || version > 5) return Err(absl::StrCat("unsupported protocol ", version));
      protocol_ = static_cast<int>(version);
      return absl::OkStatus();
    }
    case op::kFrame: {
      if (protocol_ < 4) return Err("FRAME in a protocol 2/3 pickle");
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t length, ReadUnsigned(8));
      if (length > data_.size() - pos_) {
        return Err(absl::StrFormat("truncated: frame of %d bytes, %d remain", length,
                                   data_.size() - pos_));
      }
      return absl::OkStatus();  // frames only group opcodes; nothing to do
    }
    case op::kStop:
      stopped_ = true;
      return absl::OkStatus();
    case op::kNone:
      return Push(Slot{});
    case op::kNewTrue:
    case op::kNewFalse:
      return Push(Slot{PickleKind::kBool, 0, opcode_ == op::kNewTrue ? 1u : 0u});
    case op::kBinInt1:
    case op::kBinInt2: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t v, ReadUnsigned(opcode_ == op::kBinInt1 ? 1 : 2));
      return Push(Slot{PickleKind::kInt, 0, v});
    }
    case op::kBinInt: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t v, ReadUnsigned(4));
      const int64_t value = static_cast<int32_t>(static_cast<uint32_t>(v));
      return Push(Slot{PickleKind::kInt, 0, static_cast<uint64_t>(value)});
    }
    case op::kLong1: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t n, ReadUnsigned(1));
      FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view bytes, Take(n));
      const PickleValue v = PickleValue::IntFromLittleEndian(bytes);
      if (v.kind() == PickleKind::kInt) {
        return Push(Slot{PickleKind::kInt, 0, static_cast<uint64_t>(v.int_value())});
      }
      FRAGSCOPE_ASSIGN_OR_RETURN(Slot big, arena_.NewLeaf(PickleKind::kBigInt, bytes, op_offset_));
      return Push(big);
    }
    case op::kBinFloat: {
      FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view bytes, Take(8));
      uint64_t bits = 0;
      for (const char c : bytes) bits = (bits << 8) | static_cast<uint8_t>(c);  // big-endian
      return Push(Slot{PickleKind::kFloat, 0, bits});
    }
    case op::kShortBinUnicode:
    case op::kBinUnicode:
    case op::kBinUnicode8:
    case op::kShortBinBytes:
    case op::kBinBytes:
    case op::kBinBytes8: {
      const bool str = opcode_ == op::kShortBinUnicode || opcode_ == op::kBinUnicode ||
                       opcode_ == op::kBinUnicode8;
      const size_t width = (opcode_ == op::kShortBinUnicode || opcode_ == op::kShortBinBytes) ? 1
                           : (opcode_ == op::kBinUnicode8 || opcode_ == op::kBinBytes8)       ? 8
                                                                                              : 4;
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t n, ReadUnsigned(width));
      FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view bytes, Take(n));
      FRAGSCOPE_ASSIGN_OR_RETURN(
          Slot leaf,
          arena_.NewLeaf(str ? PickleKind::kString : PickleKind::kBytes, bytes, op_offset_));
      return Push(leaf);
    }
    case op::kEmptyList:
    case op::kEmptyDict:
    case op::kEmptyTuple: {
      const PickleKind kind = opcode_ == op::kEmptyList   ? PickleKind::kList
                              : opcode_ == op::kEmptyDict ? PickleKind::kDict
                                                          : PickleKind::kTuple;
      FRAGSCOPE_ASSIGN_OR_RETURN(Slot c, arena_.NewContainer(kind, {}, op_offset_));
      if (consumer_ != nullptr) AssignRole(c);
      return Push(c);
    }
    case op::kMark:
      if (marks_.size() >= options_.max_stack) {
        return Limit(absl::StrCat("more than ", options_.max_stack, " open MARKs"));
      }
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case op::kTuple: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const size_t mark, PopMark());
      return BuildTuple(mark);
    }
    case op::kTuple1:
    case op::kTuple2:
    case op::kTuple3: {
      const size_t n = size_t{opcode_} - op::kTuple1 + 1;
      FRAGSCOPE_RETURN_IF_ERROR(NeedAboveFence(n));
      return BuildTuple(stack_.size() - n);
    }
    case op::kAppend: {
      FRAGSCOPE_RETURN_IF_ERROR(NeedAboveFence(2));
      FRAGSCOPE_ASSIGN_OR_RETURN(Container * list, Target(stack_.size() - 2, PickleKind::kList));
      if (consumer_ != nullptr) {
        NoteAttach(list->role == StreamRole::kOuter, stack_.size() - 1);
        if (list->role == StreamRole::kInner) return StreamElements(*list, stack_.size() - 1);
      }
      list->items.push_back(stack_.back());
      stack_.pop_back();
      return absl::OkStatus();
    }
    case op::kSetItem: {
      FRAGSCOPE_RETURN_IF_ERROR(NeedAboveFence(3));
      FRAGSCOPE_ASSIGN_OR_RETURN(Container * dict, Target(stack_.size() - 3, PickleKind::kDict));
      FRAGSCOPE_RETURN_IF_ERROR(CheckKey(stack_[stack_.size() - 2]));
      if (consumer_ != nullptr) NoteAttach(/*to_outer=*/false, stack_.size() - 1);
      dict->items.insert(dict->items.end(), stack_.end() - 2, stack_.end());
      stack_.resize(stack_.size() - 2);
      return absl::OkStatus();
    }
    case op::kAppends:
    case op::kSetItems: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const size_t mark, PopMark());
      if (mark <= Fence()) return Err("stack underflow: no container below the MARK");
      const bool dict = opcode_ == op::kSetItems;
      FRAGSCOPE_ASSIGN_OR_RETURN(Container * target,
                                 Target(mark - 1, dict ? PickleKind::kDict : PickleKind::kList));
      if (dict) {
        if ((stack_.size() - mark) % 2 != 0) return Err("odd number of items for SETITEMS");
        for (size_t i = mark; i < stack_.size(); i += 2) {
          FRAGSCOPE_RETURN_IF_ERROR(CheckKey(stack_[i]));
        }
      }
      if (consumer_ != nullptr) {
        NoteAttach(target->role == StreamRole::kOuter, mark);
        if (target->role == StreamRole::kInner) return StreamElements(*target, mark);
      }
      target->items.insert(target->items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark),
                           stack_.end());
      stack_.resize(mark);
      return absl::OkStatus();
    }
    case op::kMemoize:
      return Memoize(memo_.size());
    case op::kBinPut:
    case op::kLongBinPut: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t index,
                                 ReadUnsigned(opcode_ == op::kBinPut ? 1 : 4));
      return Memoize(index);
    }
    case op::kBinGet:
    case op::kLongBinGet: {
      FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t index,
                                 ReadUnsigned(opcode_ == op::kBinGet ? 1 : 4));
      return MemoGet(index);
    }
    case op::kNextBuffer:
    case op::kReadonlyBuffer:
      // pickle.dumps(..., protocol=5, buffer_callback=...) moves buffers out of the pickle; a
      // snapshot has none, and a file alone cannot supply them.
      return absl::InvalidArgumentError(absl::StrFormat(
          "pickle: out-of-band buffer (opcode %s 0x%02x at offset %d): the pickle was written "
          "with a protocol 5 buffer_callback and its buffers are not in the file; snapshots have "
          "none (torch.cuda.memory._dump_snapshot writes every value in band)",
          OpcodeName(opcode_), opcode_, op_offset_));
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("pickle: unsupported opcode %s (0x%02x) at offset %d",
                          OpcodeName(opcode_), opcode_, op_offset_));
  }
}

}  // namespace internal

using internal::Unpickler;

absl::StatusOr<PickleValue> ReadPickle(std::string_view data, const PickleReadOptions& options) {
  return Unpickler(data, options).Run();
}

absl::StatusOr<StreamedPickle> ReadPickleStreaming(std::string_view data, std::string_view key,
                                                   PickleListConsumer& consumer,
                                                   const PickleReadOptions& options) {
  Unpickler unpickler(data, options);
  unpickler.SetStream(key, &consumer);
  absl::StatusOr<PickleValue> root = unpickler.Run();
  if (!root.ok()) return root.status();
  FRAGSCOPE_ASSIGN_OR_RETURN(auto lists, unpickler.StreamedLists());
  return StreamedPickle{*std::move(root), std::move(lists)};
}

absl::StatusOr<PickleValue> ReadPickleFile(const std::string& path,
                                           const PickleReadOptions& options) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrCat("cannot size ", path));
  if (static_cast<uint64_t>(size) > options.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path, ": ", size, " bytes exceeds the pickle size limit of ", options.max_input_bytes));
  }
  std::string data(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(data.data(), size)) return absl::DataLossError(absl::StrCat("cannot read ", path));
  absl::StatusOr<PickleValue> value = ReadPickle(data, options);
  if (!value.ok()) {
    return absl::Status(value.status().code(), absl::StrCat(path, ": ", value.status().message()));
  }
  return value;
}

}  // namespace fragscope::pickle
