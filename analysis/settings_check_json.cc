#include "analysis/settings_check_json.h"

#include <string>
#include <vector>

namespace fragscope {
namespace {

void WriteKeys(JsonWriter& j, const std::vector<AllocatorKey>& keys) {
  j.BeginArray();
  for (AllocatorKey key : keys) j.String(AllocatorKeyName(key));
  j.EndArray();
}

}  // namespace

void WriteJsonSettingsCheck(JsonWriter& j, const std::optional<SettingsCheck>& check) {
  if (!check.has_value()) {
    j.Null();
    return;
  }
  j.BeginObject();
  j.Field("asked_from", check->asked_from);
  j.Field("asked", check->asked);
  j.Field("asked_valid", check->asked_valid);
  j.Field("recorded_in", check->recorded_in);
  j.Key("not_in_effect");
  j.BeginArray();
  for (const SettingNotInEffect& s : check->not_in_effect) {
    j.BeginObject();
    j.Field("key", AllocatorKeyName(s.key));
    j.Field("asked", s.asked);
    j.Field("in_effect", s.in_effect);
    j.EndObject();
  }
  j.EndArray();
  j.Key("not_recorded");
  WriteKeys(j, check->not_recorded);
  j.Key("ignored");
  WriteKeys(j, check->ignored);
  j.Key("notes");
  j.BeginArray();
  for (const std::string& note : check->notes) j.String(note);
  j.EndArray();
  j.EndObject();
}

}  // namespace fragscope
