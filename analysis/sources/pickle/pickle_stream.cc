// Unpickler's streaming of one list's elements (ReadPickleStreaming, pickle_reader.h).
#include <bit>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "analysis/sources/pickle/pickle_unpickler.h"

namespace fragscope::pickle::internal {

// A container's place, judged from the stack when it is created: Python and LibTorch write a
// container, then its elements (between MARK and APPENDS/SETITEMS, or one and APPEND/SETITEM).
// Whether a container of `role` is open for elements: right below the last MARK, or on top of
// the stack.
bool Unpickler::Open(StreamRole role) const {
  const auto is = [&](const Slot& s) {
    return (s.kind == PickleKind::kList || s.kind == PickleKind::kDict) &&
           arena_.container(s).role == role;
  };
  const size_t fence = Fence();
  if (fence > 0 && is(stack_[fence - 1])) return true;
  return !stack_.empty() && stack_.size() > fence && is(stack_.back());
}

void Unpickler::AssignRole(const Slot& c) {
  Container& container = arena_.container(c);
  if (!root_seen_) {
    root_seen_ = true;
    if (stack_.empty() && c.kind == PickleKind::kDict) root_ = c.ref;
    return;
  }
  if (c.kind == PickleKind::kList && !outer_.has_value() && root_.has_value() && !stack_.empty() &&
      stack_.back().kind == PickleKind::kString &&
      arena_.leaf(stack_.back()).string_value() == stream_key_ &&
      stack_[0].kind == PickleKind::kDict && stack_[0].ref == *root_ &&
      ((marks_.size() == 1 && marks_[0] == 1 && stack_.size() % 2 == 0) ||
       (marks_.empty() && stack_.size() == 2))) {
    container.role = StreamRole::kOuter;  // the value of the key in the root dict
    outer_ = c.ref;
    return;
  }
  if (c.kind == PickleKind::kList && Open(StreamRole::kOuter)) {
    container.role = StreamRole::kInner;
    container.stream_tag = static_cast<uint32_t>(inner_.size());
    inner_.push_back(Inner{c.ref, 0, 0});
    return;
  }
  if (Open(StreamRole::kInner) || Open(StreamRole::kElement)) {
    container.role = StreamRole::kElement;  // an element, or a container made inside one
  }
}

// stack_[first..] are put in a container (the outer list, or another): where each inner list
// went, checked once the pickle ends (Run).
void Unpickler::NoteAttach(bool to_outer, size_t first) {
  for (size_t i = first; i < stack_.size(); ++i) {
    const Slot& item = stack_[i];
    if (item.kind != PickleKind::kList) continue;
    const Container& c = arena_.container(item);
    if (c.role != StreamRole::kInner) continue;
    if (to_outer) {
      ++inner_[c.stream_tag].attached;
    } else {
      inner_[c.stream_tag].elsewhere = true;
    }
  }
}

StreamValue Unpickler::View(const Slot& slot) const {
  StreamValue v;
  v.kind = slot.kind;
  switch (slot.kind) {
    case PickleKind::kBool:
    case PickleKind::kInt:
      v.int_value = static_cast<int64_t>(slot.bits);
      break;
    case PickleKind::kFloat:
      v.float_value = std::bit_cast<double>(slot.bits);
      break;
    case PickleKind::kString:
    case PickleKind::kBytes:
      v.text = arena_.leaf(slot).string_value();
      break;
    case PickleKind::kTuple: {
      const std::vector<Slot>& items = arena_.container(slot).items;
      if (items.size() == 2 && items[0].kind == PickleKind::kInt &&
          items[1].kind == PickleKind::kInt) {
        v.int_pair.emplace(static_cast<int64_t>(items[0].bits),
                           static_cast<int64_t>(items[1].bits));
      }
      break;
    }
    default:
      break;
  }
  if (slot.kind == PickleKind::kList || slot.kind == PickleKind::kDict ||
      slot.kind == PickleKind::kTuple) {
    const Container& c = arena_.container(slot);
    v.container = slot.ref + 1;
    v.note = c.role == StreamRole::kInner ? 0 : c.stream_tag;
  }
  return v;
}

namespace {

// The container a view names, or nullptr (StreamContents).
Container* Named(PickleArena& arena, const StreamValue& value) {
  if (value.container == 0 || value.container > arena.container_count()) return nullptr;
  return &arena.container(Slot{value.kind, value.container - 1, 0});
}

}  // namespace

bool Unpickler::Items(const StreamValue& value, std::vector<StreamValue>* items) {
  items->clear();
  Container* c = Named(arena_, value);
  if (c == nullptr || c->role == StreamRole::kConsumed) return false;
  c->frozen = true;  // Target refuses to change it from now on
  items->reserve(c->items.size());
  for (const Slot& item : c->items) items->push_back(View(item));
  return true;
}

bool Unpickler::Note(const StreamValue& value, uint32_t note) {
  Container* c = Named(arena_, value);
  if (c == nullptr || c->role == StreamRole::kInner) return false;
  c->stream_tag = note;
  return true;
}

// Hands stack_[first..] to the consumer as elements of `inner`, and drops them.
absl::Status Unpickler::StreamElements(Container& inner, size_t first) {
  Inner& list = inner_[inner.stream_tag];
  for (size_t i = first; i < stack_.size(); ++i) {
    const Slot item = stack_[i];
    scratch_.clear();
    const bool container = item.kind == PickleKind::kList || item.kind == PickleKind::kDict ||
                           item.kind == PickleKind::kTuple;
    Container* c = container ? &arena_.container(item) : nullptr;
    if (c != nullptr && c->role == StreamRole::kConsumed) {
      return Layout(
          absl::StrFormat("the %s created at offset %d was streamed, and is streamed again",
                          PickleKindName(item.kind), c->offset));
    }
    if (item.kind == PickleKind::kDict) {
      for (size_t k = 0; k + 1 < c->items.size(); k += 2) {
        scratch_.emplace_back(View(c->items[k]), View(c->items[k + 1]));
      }
    }
    FRAGSCOPE_RETURN_IF_ERROR(
        consumer_->Element(inner.stream_tag, list.streamed++, View(item), scratch_, *this));
    if (c != nullptr && c->role == StreamRole::kElement) {
      // The element and what was made inside it (its frames list) go; shared values stay.
      for (const Slot& v : c->items) {
        if ((v.kind == PickleKind::kList || v.kind == PickleKind::kDict) && v.ref > item.ref &&
            arena_.container(v).role == StreamRole::kElement) {
          arena_.Consume(v);
        }
      }
      arena_.Consume(item);
    }
  }
  stack_.resize(first);
  return absl::OkStatus();
}

absl::StatusOr<absl::flat_hash_map<const void*, size_t>> Unpickler::StreamedLists() const {
  absl::flat_hash_map<const void*, size_t> lists;
  for (size_t i = 0; i < inner_.size(); ++i) {
    if (const PickleValue* v = arena_.finalized(inner_[i].container)) lists[v->identity()] = i;
  }
  return lists;
}

}  // namespace fragscope::pickle::internal
