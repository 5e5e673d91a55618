// The JSON rendering of a SettingsCheck ("settings_check" in REPORT_SCHEMA.md).
#pragma once

#include <optional>

#include "analysis/json_writer.h"
#include "analysis/settings_check.h"

namespace fragscope {

// Writes the object, or null when there is no check.
void WriteJsonSettingsCheck(JsonWriter& j, const std::optional<SettingsCheck>& check);

}  // namespace fragscope
