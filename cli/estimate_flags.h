// The command line of `fragscope estimate`: which flags exist, the parsed `Flags`, and readers
// that turn one flag's value into a field or into an error naming the flag and the value. The
// estimator's configurations are built from these in estimate_config.h; the command itself is
// estimate_command.cc.
//
// The flags are declared in EstimateCommand() and parsed by flag_parser.h, as every command's are;
// `estimate` takes no positional arguments.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cli/flag_parser.h"

namespace fragscope::cli::estimate {

// Parsed command line: switches present and valued flag -> value, names without the dashes.
struct Flags {
  std::map<std::string, bool> switches;
  std::map<std::string, std::string> values;

  bool Has(const std::string& name) const {
    return switches.count(name) > 0 || values.count(name) > 0;
  }
  std::optional<std::string> Value(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

// The command's flags, with their --help texts.
const CommandSpec& EstimateCommand();

// Errors: flag_parser.h's, and a positional argument.
absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args);

// "invalid value 'VALUE' for --FLAG: expected WANT".
absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want);

// Wraps a library error so that it names the flag that carried the value ("--FLAG: message").
// An OK status is returned as is.
absl::Status ForFlag(absl::string_view flag, const absl::Status& status);

// The readers below leave `field` unchanged when the flag is absent and on error.

// Integer flag, >= minimum.
absl::Status ReadInt(const Flags& flags, const std::string& name, int64_t minimum, int64_t& field);

// Finite number flag in [minimum, maximum].
absl::Status ReadDouble(const Flags& flags, const std::string& name, double minimum, double maximum,
                        double& field);

// Runs a parser from estimator/ (`parse(text, field_name) -> StatusOr<T>`) on a flag's value; its
// error names the field as "--NAME".
template <typename T, typename Parser>
absl::Status ReadEnum(const Flags& flags, const std::string& name, Parser parse, T& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  absl::StatusOr<T> parsed = parse(*value, absl::StrCat("--", name));
  if (!parsed.ok()) return parsed.status();
  field = *parsed;
  return absl::OkStatus();
}

// A parameter count for --params: "7e9", "6.7B", "125M", "70b", "1.5T", "350k" -> count, in
// [1, 9e15].
absl::StatusOr<int64_t> ParseCount(absl::string_view text);

// The estimator names configuration fields like the valued flags ("tp = 3 does not divide ...");
// returns `message` with "--" in front when it starts with such a name followed by " = ".
std::string ShowFieldsAsFlags(absl::string_view message);

}  // namespace fragscope::cli::estimate
