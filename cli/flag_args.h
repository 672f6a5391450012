// pshardctl's flag arguments, checked before absl::ParseCommandLine sees
// them. Abseil exits 1, in its own words, on an unknown flag or a bad value;
// for pshardctl both are bad input (exit 2, one "pshardctl: ..." line), and
// the names of the flags given are needed to refuse those the subcommand
// does not take (CheckFlagsApply in commands.h).
#ifndef PSHARD_CLI_FLAG_ARGS_H_
#define PSHARD_CLI_FLAG_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pshard::cli {

// `args` (args[0] is the program) with kubectl's short form of --output:
// `-o VALUE`, `-o=VALUE` and `-oVALUE` become `--output=VALUE`.
std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args);

// Checks every flag argument in args[1..] (up to "--"), in the forms Abseil
// accepts (--name=value, --name value, -name, --name and --noname for bools):
// the flag is defined, and its value parses (through the flag's own parser,
// which also sets it; ParseCommandLine sets the same value again). Returns the
// names given, in order, a negated bool under its own name; Abseil's built-in
// flags (--helpfull, --version, --flagfile, ...) are accepted and not listed.
// InvalidArgument: "unknown flag --x", "--limit=abc: not an integer",
// "--limit: missing value".
absl::StatusOr<std::vector<std::string>> CheckFlagArgs(
    const std::vector<std::string>& args);

}  // namespace pshard::cli

#endif  // PSHARD_CLI_FLAG_ARGS_H_
