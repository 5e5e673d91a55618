#include "analysis/report/settings_check_json.h"

#include <string>
#include <vector>

namespace fragscope {
namespace {

using estimator::OrderedJson;

OrderedJson Keys(const std::vector<AllocatorKey>& keys) {
  OrderedJson names = OrderedJson::array();
  for (AllocatorKey key : keys) names.push_back(std::string(AllocatorKeyName(key)));
  return names;
}

}  // namespace

OrderedJson JsonSettingsCheck(const std::optional<SettingsCheck>& check) {
  if (!check.has_value()) return nullptr;
  OrderedJson j;
  j["asked_from"] = check->asked_from;
  j["asked"] = check->asked;
  j["asked_valid"] = check->asked_valid;
  j["recorded_in"] = check->recorded_in;
  OrderedJson not_in_effect = OrderedJson::array();
  for (const SettingNotInEffect& s : check->not_in_effect) {
    OrderedJson item;
    item["key"] = std::string(AllocatorKeyName(s.key));
    item["asked"] = s.asked;
    item["in_effect"] = s.in_effect;
    not_in_effect.push_back(std::move(item));
  }
  j["not_in_effect"] = std::move(not_in_effect);
  j["not_recorded"] = Keys(check->not_recorded);
  j["ignored"] = Keys(check->ignored);
  j["notes"] = check->notes;
  return j;
}

}  // namespace fragscope
