#include "analysis/replay/replay_phases.h"

namespace fragscope {

PhaseTable::PhaseTable() : text_{"(no marker)", "before the trace"}, refs_{1u << 30, 1u << 30} {}

uint32_t PhaseTable::Intern(const std::string& text) {
  if (auto it = ids_.find(text); it != ids_.end()) return it->second;
  uint32_t id;
  if (!released_.empty()) {
    id = released_.back();
    released_.pop_back();
    text_[id] = text;
    refs_[id] = 0;
  } else {
    id = static_cast<uint32_t>(text_.size());
    text_.push_back(text);
    refs_.push_back(0);
  }
  ids_.emplace(text, id);
  return id;
}

void PhaseTable::Release(uint32_t id) {
  ids_.erase(text_[id]);
  released_.push_back(id);
}

}  // namespace fragscope
