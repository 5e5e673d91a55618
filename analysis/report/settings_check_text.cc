// The effective-settings check in the text report (SettingsCheck).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/report/text_report.h"

namespace fragscope {
namespace {

std::string KeyNames(const std::vector<AllocatorKey>& keys) {
  std::vector<std::string> names;
  for (AllocatorKey key : keys) names.emplace_back(AllocatorKeyName(key));
  return absl::StrJoin(names, ", ");
}

}  // namespace

void RenderSettingsCheckText(const SettingsCheck& check, std::ostream& out) {
  const std::string asked = absl::StrCat(check.asked_from, " '", check.asked, "'");
  if (!check.not_in_effect.empty()) {
    std::vector<std::string> items;
    for (const SettingNotInEffect& s : check.not_in_effect) {
      items.push_back(absl::StrCat(std::string(AllocatorKeyName(s.key)), ":", s.asked,
                                   " (in effect: ", s.in_effect, ")"));
    }
    WriteWrapped(out,
                 absl::StrCat("settings asked for in ", asked, " but not in effect in the job (",
                              check.recorded_in, "): ", absl::StrJoin(items, ", ")),
                 "  ");
  } else if (!check.asked_valid) {
    // The notes say why.
  } else if (check.recorded_in.empty()) {
    WriteWrapped(out,
                 absl::StrCat("settings asked for in ", asked,
                              ": the trace does not record the settings in effect"),
                 "  ");
  } else {
    WriteWrapped(out,
                 absl::StrCat("settings asked for in ", asked, ": in effect as far as ",
                              check.recorded_in, " record"),
                 "  ");
  }
  if (!check.not_recorded.empty() && !check.recorded_in.empty()) {
    WriteWrapped(out,
                 absl::StrCat("not recorded in ", check.recorded_in,
                              ", so not checked: ", KeyNames(check.not_recorded)),
                 "    ");
  }
  if (!check.ignored.empty()) {
    WriteWrapped(out,
                 absl::StrCat("accepted and ignored (no effect on device memory): ",
                              KeyNames(check.ignored)),
                 "    ");
  }
  for (const std::string& note : check.notes) WriteWrapped(out, note, "    ");
}

}  // namespace fragscope
