// PhaseTable: the replay's phases, i.e. the texts of the trace's markers ("step 12 / forward"),
// interned and reference-counted by the live blocks allocated in them (and by the current
// phase), so that a trace with millions of distinct markers costs O(live blocks), not O(markers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace fragscope {

class PhaseTable {
 public:
  // Two phases that are never released.
  static constexpr uint32_t kStart = 0;   // "(no marker)": events before the first marker
  static constexpr uint32_t kBefore = 1;  // blocks that existed before the trace began

  PhaseTable();

  // The id of `text`: its existing id, or a new one (a released id is reused) with no
  // references.
  uint32_t Intern(const std::string& text);
  void Ref(uint32_t id) { ++refs_[id]; }
  // Releases `id` when its last reference goes (never kStart or kBefore).
  // REQUIRES: id has a reference.
  void Unref(uint32_t id) {
    if (--refs_[id] == 0 && id > kBefore) Release(id);
  }
  // REQUIRES: `id` came from Intern (or is kStart/kBefore) and has not been released.
  const std::string& Text(uint32_t id) const { return text_[id]; }

 private:
  void Release(uint32_t id);

  std::vector<std::string> text_;
  std::vector<uint32_t> refs_;
  std::vector<uint32_t> released_;  // ids free for reuse
  absl::flat_hash_map<std::string, uint32_t> ids_;
};

}  // namespace fragscope
