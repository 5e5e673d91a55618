#include "cli/flag_parser.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/usage_error.h"

namespace fragscope::cli {
namespace {

constexpr size_t kColumns = 100;  // help pages are read at 100 columns
constexpr size_t kMaxLabel = 26;  // a longer "--flag VALUE" puts its help on the next line
constexpr char kHelpNames[] = "-h,--help";

// This Abseil's string_view is its own type.
absl::string_view Abseil(std::string_view text) { return {text.data(), text.size()}; }

const FlagSpec* Find(const CommandSpec& command, std::string_view name) {
  for (const FlagSpec& f : command.flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// What CLI11 parses into: one vector per valued flag (every occurrence, so that a repeated flag is
// seen); the switches' counts are the App's. Positional arguments are left in the App's
// remaining() (in order, with unknown flags), so that CLI11 never splits one: a value or file name
// in brackets, "[64:8,>:1]", is its vector syntax otherwise.
struct Storage {
  std::deque<std::vector<std::string>> values;  // in command.flags order (valued flags only)
};

std::unique_ptr<CLI::App> BuildApp(const CommandSpec& command, Storage& storage) {
  auto app = std::make_unique<CLI::App>(std::string(command.description),
                                        absl::StrCat("fragscope ", Abseil(command.name)));
  app->set_help_flag();  // --help is a plain switch here: ParseFlags reports it, HelpText prints
  app->allow_extras();   // unknown flags are reported by name, below
  std::string last_group;
  for (const FlagSpec& f : command.flags) {
    CLI::Option* option = f.value.empty()
                              ? app->add_flag(std::string(f.name))
                                    ->description(std::string(f.help))
                                    ->disable_flag_override()
                              : app->add_option(std::string(f.name), storage.values.emplace_back(),
                                                std::string(f.help))
                                    ->expected(1)
                                    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
                                    ->allow_extra_args(false)
                                    ->type_name(std::string(f.value));
    if (!f.group.empty()) {
      option->group(std::string(f.group));
      last_group = f.group;
    }
  }
  CLI::Option* help = app->add_flag(kHelpNames)->description("this text");
  if (!last_group.empty()) help->group(last_group);
  app->footer(std::string(command.footer));
  return app;
}

// `text`'s lines (split at '\n'), each wrapped at `width` columns on spaces.
std::vector<std::string> WrapLines(std::string_view text, size_t width) {
  std::vector<std::string> lines;
  for (absl::string_view piece : absl::StrSplit(Abseil(text), '\n')) {
    std::string_view line(piece.data(), piece.size());
    while (line.size() > width) {
      size_t cut = line.rfind(' ', width);
      if (cut == std::string_view::npos || cut == 0) cut = line.find(' ', width);
      if (cut == std::string_view::npos) break;
      lines.emplace_back(line.substr(0, cut));
      line.remove_prefix(cut + 1);
    }
    lines.emplace_back(line);
  }
  return lines;
}

std::string Label(const CLI::Option& option) {
  std::string label;
  for (const std::string& name : option.get_snames()) absl::StrAppend(&label, "-", name, ", ");
  for (const std::string& name : option.get_lnames()) absl::StrAppend(&label, "--", name, ", ");
  label.resize(label.size() - 2);
  if (option.get_type_size() != 0) absl::StrAppend(&label, " ", option.get_type_name());
  return label;
}

// The help page of an App built by BuildApp (CLI11's formatter hook: every command's page comes
// from here).
std::string RenderHelp(const CLI::App& app, const CommandSpec& command) {
  std::string out =
      absl::StrCat("usage: fragscope ", Abseil(command.name), " ", Abseil(command.synopsis), "\n");
  if (!command.description.empty()) absl::StrAppend(&out, "\n", Abseil(command.description), "\n");
  const std::vector<const CLI::Option*> options =
      app.get_options([](const CLI::Option* o) { return o->nonpositional(); });
  size_t width = 0;
  for (const CLI::Option* o : options) {
    width = std::max(width, std::min(Label(*o).size(), kMaxLabel));
  }
  const size_t column = 2 + width + 2;
  const std::string indent(column, ' ');
  out += "\n";
  std::string group = "Options";  // CLI11's default group: no heading
  for (const CLI::Option* o : options) {
    if (o->get_group() != group) {
      group = o->get_group();
      absl::StrAppend(&out, group, ":\n");
    }
    const std::string label = Label(*o);
    const std::vector<std::string> lines = WrapLines(o->get_description(), kColumns - column);
    if (label.size() > width) {
      absl::StrAppend(&out, "  ", label, "\n");
      for (const std::string& line : lines) absl::StrAppend(&out, indent, line, "\n");
      continue;
    }
    absl::StrAppend(&out, "  ", label, std::string(width - label.size() + 2, ' '), lines[0], "\n");
    for (size_t i = 1; i < lines.size(); ++i) absl::StrAppend(&out, indent, lines[i], "\n");
  }
  if (!command.footer.empty()) absl::StrAppend(&out, "\n", Abseil(command.footer), "\n");
  return out;
}

}  // namespace

std::vector<FlagSpec> Flags(std::initializer_list<std::vector<FlagSpec>> lists) {
  std::vector<FlagSpec> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const CommandSpec& command) {
  // The shape of each flag (a value or none, and never the next flag as a value), checked before
  // CLI11, which would take "--json --explain" as a file named "--explain".
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const std::string_view name = std::string_view(arg).substr(0, eq);
    const FlagSpec* spec = Find(command, name);
    if (spec == nullptr) continue;  // unknown: reported below
    if (spec->value.empty()) {
      if (eq != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag ", Abseil(name), " takes no value (got '", arg.substr(eq + 1), "')"));
      }
      continue;
    }
    if (eq != std::string::npos) continue;
    if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag ", Abseil(name), " needs a value (", Abseil(spec->value), ")",
                       i + 1 < args.size() ? absl::StrCat(", not the flag ", args[i + 1]) : ""));
    }
    ++i;
  }

  Storage storage;
  std::unique_ptr<CLI::App> app = BuildApp(command, storage);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses from the back
  try {
    app->parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  ParsedFlags parsed;
  bool after_dashes = false;
  for (std::string& arg : app->remaining()) {
    if (!after_dashes && arg == "--") {
      after_dashes = true;
    } else if (!after_dashes && arg.size() > 1 && arg[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg.substr(0, arg.find('=')), "'"));
    } else {
      parsed.positional.push_back(std::move(arg));
    }
  }
  parsed.help = app->count("--help") > 0;
  size_t valued = 0;
  for (const FlagSpec& f : command.flags) {
    const std::vector<std::string>* values = f.value.empty() ? nullptr : &storage.values[valued++];
    const size_t count = values != nullptr ? values->size() : app->count(std::string(f.name));
    // Last-one-wins would silently drop a value the user gave (a second --json path).
    if (count > 1)
      return absl::InvalidArgumentError(absl::StrCat("flag ", Abseil(f.name), " given twice"));
    if (count == 1) parsed.values[std::string(f.name)] = values != nullptr ? values->front() : "";
  }
  return parsed;
}

std::string HelpText(const CommandSpec& command) {
  Storage storage;
  std::unique_ptr<CLI::App> app = BuildApp(command, storage);
  app->formatter_fn([&command](const CLI::App* a, std::string, CLI::AppFormatMode) {
    return RenderHelp(*a, command);
  });
  return app->help();
}

std::optional<ParsedFlags> ParseCommandFlags(const std::vector<std::string>& args,
                                             const CommandSpec& command, std::ostream& out,
                                             std::ostream& err, int* exit_code) {
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, command);
  if (!flags.ok()) {
    *exit_code = UsageError(err, command.name, flags.status().message());
    return std::nullopt;
  }
  if (flags->help) {
    out << HelpText(command);
    *exit_code = 0;
    return std::nullopt;
  }
  const size_t given = flags->positional.size();
  if (given < command.positional.min || given > command.positional.max) {
    *exit_code = UsageError(err, command.name, Abseil(command.positional.error));
    return std::nullopt;
  }
  return *std::move(flags);
}

}  // namespace fragscope::cli
