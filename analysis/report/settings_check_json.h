// The JSON rendering of a SettingsCheck ("settings_check" in REPORT_SCHEMA.md).
#pragma once

#include <optional>

#include "analysis/sources/settings_check.h"
#include "estimator/json_document.h"

namespace fragscope {

// The object, or null when there is no check.
estimator::OrderedJson JsonSettingsCheck(const std::optional<SettingsCheck>& check);

}  // namespace fragscope
