// The one flag parser of every fragscope subcommand, on CLI11: a command declares its flags once
// (CommandSpec), and the same declaration parses the arguments and renders `--help`, so that every
// command's help page and usage errors have one form.
//
// Flags are "--name VALUE" or "--name=VALUE" for valued flags and "--name" for switches; each may
// be given once; "--" ends the flags (what follows is positional, even when it starts with "-").
// A valued flag is never given the next flag as its value ("--json --explain" is an error; write
// "--json=--explain" for a file of that name); "-" alone is a value (standard input or output).
// "--help" and "-h" are accepted by every command. Depends on CLI11 and Abseil only, so that
// commands built into small test binaries on their own (dump, estimate) use it too.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragscope::cli {

struct FlagSpec {
  std::string_view name;        // with the dashes: "--capacity"
  std::string_view value = {};  // the value's name in --help ("SIZE"); empty: a switch
  std::string_view help = {};   // its --help text; '\n' starts a new line
  std::string_view group = {};  // the heading it is listed under in --help ("": none)
};

// How many positional arguments a command takes, and its usage error for another number.
struct PositionalSpec {
  size_t min = 0;
  size_t max = std::numeric_limits<size_t>::max();
  std::string_view error = {};
};

struct CommandSpec {
  std::string_view name;           // "analyze"
  std::string_view synopsis;       // after "usage: fragscope NAME "; '\n' continues it
  std::string_view description;    // the paragraphs between the usage line and the flags
  std::vector<FlagSpec> flags;     // in --help order; groups in order of first appearance
  std::string_view footer = {};    // a paragraph after the flags
  PositionalSpec positional = {};  // checked by ParseCommandFlags
};

struct ParsedFlags {
  bool help = false;  // --help or -h was given
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // flag -> value ("" for switches)
  bool Has(std::string_view flag) const { return values.count(std::string(flag)) > 0; }
  const std::string* Get(std::string_view flag) const {
    auto it = values.find(std::string(flag));
    return it == values.end() ? nullptr : &it->second;
  }
};

// Errors (each names the flag): an unknown flag, a flag given twice, a switch given a value, a
// valued flag without its value.
absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const CommandSpec& command);

// The command's --help page: "usage: fragscope NAME SYNOPSIS", the description, the flags (one
// entry each, grouped, their help aligned in one column and wrapped at 100 columns), the footer.
std::string HelpText(const CommandSpec& command);

// What every command does first: parses `args` for `command`; --help prints the help to `out`; a
// bad flag, or a number of positional arguments outside the command's, a usage error to `err`
// (UsageError). Returns the flags, or nullopt when the command ends now, with `*exit_code` set
// (0 after --help, 2 after a usage error).
std::optional<ParsedFlags> ParseCommandFlags(const std::vector<std::string>& args,
                                             const CommandSpec& command, std::ostream& out,
                                             std::ostream& err, int* exit_code);

// Concatenation of flag lists (shared lists such as the trace flags, and a command's own).
std::vector<FlagSpec> Flags(std::initializer_list<std::vector<FlagSpec>> lists);

}  // namespace fragscope::cli
