#include "allocator/roundup_power2_divisions.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/allocator_options.h"
#include "allocator/check.h"

namespace fragscope {
namespace {

constexpr size_t kIntervals = kRoundupPower2Intervals;
constexpr uint64_t kMaxDivisions = uint64_t{1} << 31;

// Checks a division value of the list form (`shown` is the item as written, for the error).
absl::Status CheckListDivision(const alloc_conf::Entry& entry, const std::string& shown,
                               uint64_t division) {
  if (division != 0 && !std::has_single_bit(division)) {
    return alloc_conf::ValueError(entry, shown, "has a division that is not 0 or a power of 2");
  }
  if (division > kMaxDivisions) {
    return alloc_conf::ValueError(
        entry, shown, absl::StrCat("has too many divisions, must be <= ", kMaxDivisions));
  }
  return absl::OkStatus();
}

// The interval index of a list key of `boundary_mb` MB. REQUIRES: boundary_mb is a power of 2.
size_t IntervalOfBoundary(uint64_t boundary_mb) {
  return std::min(static_cast<size_t>(std::countr_zero(boundary_mb)), kIntervals - 1);
}

}  // namespace

absl::Status ApplyRoundupPower2Divisions(const alloc_conf::Entry& entry,
                                         RoundupPower2Table& table) {
  if (!entry.is_list) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t division, alloc_conf::ToUint64(entry, entry.value));
    if (!std::has_single_bit(division)) {
      return alloc_conf::ValueError(entry, entry.value.text, "is not a power of 2");
    }
    if (division > kMaxDivisions) {
      return alloc_conf::ValueError(entry, entry.value.text,
                                    absl::StrCat("is too large, must be <= ", kMaxDivisions));
    }
    table.fill(static_cast<uint32_t>(division));
    return absl::OkStatus();
  }
  bool first_numeric_key = true;
  size_t last_index = 0;
  for (const alloc_conf::ListItem& item : entry.items) {
    const std::string shown = absl::StrCat(item.key.text, ":", item.value.text);
    FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t division, alloc_conf::ToUint64(entry, item.value));
    FRAGSCOPE_RETURN_IF_ERROR(CheckListDivision(entry, shown, division));
    const auto value = static_cast<uint32_t>(division);
    if (item.key.text == ">") {
      std::fill(table.begin() + static_cast<std::ptrdiff_t>(std::min(last_index + 1, kIntervals)),
                table.end(), value);
      continue;
    }
    FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t boundary_mb, alloc_conf::ToUint64(entry, item.key));
    if (!std::has_single_bit(boundary_mb)) {
      return alloc_conf::ValueError(entry, shown,
                                    "has an interval that is not a power of 2 (in MB)");
    }
    const size_t index = IntervalOfBoundary(boundary_mb);
    if (first_numeric_key) {
      std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(index), value);
      first_numeric_key = false;
    }
    table[index] = value;
    last_index = index;
  }
  return absl::OkStatus();
}

// Canonical list: the first key closes the leading run of equal values (it fills below itself),
// ">" writes the trailing run when it is not 0, and keys in between are listed when not 0 (or
// when ">" needs them as its anchor: it fills from the interval after the last listed key).
std::string FormatRoundupPower2Divisions(const RoundupPower2Table& table) {
  const uint32_t head = table.front();
  const uint32_t tail = table.back();
  if (std::all_of(table.begin(), table.end(), [&](uint32_t d) { return d == head; })) {
    return head == 0 ? "" : absl::StrCat(head);
  }
  size_t head_end = 0;  // last index of the leading run
  while (table[head_end + 1] == head) ++head_end;
  size_t tail_begin = kIntervals - 1;  // first index of the trailing run
  while (table[tail_begin - 1] == tail) --tail_begin;
  FRAGSCOPE_DCHECK(head_end < tail_begin);
  std::vector<std::string> items;
  const auto add = [&](size_t index) {
    items.push_back(absl::StrCat(uint64_t{1} << index, ":", table[index]));
  };
  add(head_end);
  for (size_t index = head_end + 1; index < tail_begin; ++index) {
    if (table[index] != 0 || (tail != 0 && index + 1 == tail_begin)) add(index);
  }
  if (tail != 0) items.push_back(absl::StrCat(">:", tail));
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

}  // namespace fragscope
