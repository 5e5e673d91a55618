// The one flag parser (cli/flag_parser.h): the shape rules every command shares, and the
// help page every command renders; then every command's page and usage errors, through the
// program.
#include "cli/flag_parser.h"

#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"

namespace fragscope {
namespace {

using testing::CommandRun;
using testing::Fragscope;
using ::testing::HasSubstr;
using ::testing::Not;

const cli::CommandSpec& Spec() {
  static const cli::CommandSpec spec{
      .name = "test",
      .synopsis = "IN... [--out OUT]",
      .description = "Does a test.",
      .flags = {{"--out", "OUT", "where to write"},
                {"--grid", "LIST", "a list"},
                {"--quiet", "", "say less"},
                {"--level", "N", "how much\nsecond line", "Tuning"}},
      .footer = "Exit status: 0.",
  };
  return spec;
}

std::string Error(const std::vector<std::string>& args) {
  absl::StatusOr<cli::ParsedFlags> flags = cli::ParseFlags(args, Spec());
  return flags.ok() ? "" : std::string(flags.status().message());
}

TEST(FlagParserTest, ValuesSwitchesAndPositionalsInOrder) {
  absl::StatusOr<cli::ParsedFlags> flags = cli::ParseFlags(
      {"a", "--out", "o.json", "-", "--quiet", "--level=3", "b", "--", "--c", "-d"}, Spec());
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_THAT(flags->positional, ::testing::ElementsAre("a", "-", "b", "--c", "-d"));
  EXPECT_EQ(*flags->Get("--out"), "o.json");
  EXPECT_EQ(*flags->Get("--level"), "3");
  EXPECT_TRUE(flags->Has("--quiet"));
  EXPECT_FALSE(flags->Has("--grid"));
  EXPECT_FALSE(flags->help);
}

// CLI11 splits "[a,b]" into a vector: a value or a file name in brackets stays whole here.
TEST(FlagParserTest, BracketsAreNotAList) {
  absl::StatusOr<cli::ParsedFlags> flags =
      cli::ParseFlags({"--grid", "4,[64:8,>:1]", "[x,y]", "--out=[1,2]"}, Spec());
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(*flags->Get("--grid"), "4,[64:8,>:1]");
  EXPECT_EQ(*flags->Get("--out"), "[1,2]");
  EXPECT_THAT(flags->positional, ::testing::ElementsAre("[x,y]"));
}

TEST(FlagParserTest, ErrorsNameTheFlag) {
  EXPECT_EQ(Error({"--bogus"}), "unknown flag '--bogus'");
  EXPECT_EQ(Error({"--bogus=1", "x"}), "unknown flag '--bogus'");
  EXPECT_EQ(Error({"-x"}), "unknown flag '-x'");
  EXPECT_EQ(Error({"--out", "a", "--out=b"}), "flag --out given twice");
  EXPECT_EQ(Error({"--quiet", "--quiet"}), "flag --quiet given twice");
  EXPECT_EQ(Error({"--quiet=yes"}), "flag --quiet takes no value (got 'yes')");
  EXPECT_EQ(Error({"x", "--out"}), "flag --out needs a value (OUT)");
  // The next flag is never taken as the value; written inline, it is one.
  EXPECT_EQ(Error({"--out", "--quiet"}), "flag --out needs a value (OUT), not the flag --quiet");
  EXPECT_EQ(Error({"--out=--quiet"}), "");
  // "-" is a value (standard output), a negative number too.
  EXPECT_EQ(Error({"--out", "-", "--level", "-1"}), "");
}

TEST(FlagParserTest, HelpIsASwitchOfEveryCommand) {
  for (const char* help : {"--help", "-h"}) {
    absl::StatusOr<cli::ParsedFlags> flags = cli::ParseFlags({"x", help}, Spec());
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_TRUE(flags->help);
  }
}

TEST(FlagParserTest, HelpPageListsEveryFlag) {
  const std::string help = cli::HelpText(Spec());
  EXPECT_EQ(help,
            "usage: fragscope test IN... [--out OUT]\n"
            "\n"
            "Does a test.\n"
            "\n"
            "  --out OUT    where to write\n"
            "  --grid LIST  a list\n"
            "  --quiet      say less\n"
            "Tuning:\n"
            "  --level N    how much\n"
            "               second line\n"
            "  -h, --help   this text\n"
            "\n"
            "Exit status: 0.\n");
}

// Every command: a page of one form (a usage line, each flag on a line of its own, at most 100
// columns), and usage errors of one form (exit 2, the flag named, where the help is).
TEST(FlagParserTest, EveryCommandsHelpAndErrorsLookAlike) {
  for (const char* command : {"analyze", "verify", "sweep", "convert", "demo", "summarize", "merge",
                              "dump", "estimate"}) {
    CommandRun help = Fragscope({command, "--help"});
    EXPECT_EQ(help.code, 0) << command;
    EXPECT_EQ(help.out.rfind(std::string("usage: fragscope ") + command + " ", 0), 0u) << help.out;
    EXPECT_THAT(help.out, HasSubstr("\n  -h, --help ")) << command;
    std::istringstream lines(help.out);
    for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;

    CommandRun bogus = Fragscope({command, "--bogus"});
    EXPECT_EQ(bogus.code, 2) << command;
    EXPECT_EQ(bogus.err, std::string("fragscope ") + command + ": unknown flag '--bogus'\nRun " +
                             "'fragscope " + command + " --help' for usage.\n");
    EXPECT_THAT(bogus.out, Not(HasSubstr("usage")));
  }
}

}  // namespace
}  // namespace fragscope
