#include "cli/flag_args.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pshard::cli {
namespace {

// Handled inside absl::ParseCommandLine, valid with every command.
constexpr absl::string_view kAbseilBuiltinFlags[] = {
    "helpfull", "helpshort",       "helppackage", "helpon",
    "helpmatch", "version",        "only_check_args", "flagfile",
    "fromenv",  "tryfromenv",      "undefok"};

// What a value of `flag` looks like, for the error about one that is not.
std::string Expected(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "not true or false";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) {
    return "not an integer";
  }
  if (flag.IsOfType<absl::Duration>()) {
    return "not a duration (e.g. 30s, 5m, 1h30m)";
  }
  return "not a valid value";
}

}  // namespace

std::vector<std::string> ExpandShortFlags(
    const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.insert(out.end(), args.begin() + i, args.end());
      break;
    }
    // "-output=json" is Abseil's single-dash spelling of --output, not -o.
    const bool short_output =
        i > 0 && absl::StartsWith(arg, "-o") &&
        absl::FindCommandLineFlag(
            absl::string_view(arg).substr(1, arg.find('=') - 1)) == nullptr;
    if (!short_output) {
      out.push_back(arg);
    } else if (arg == "-o") {
      // The value is the next argument; a missing one is reported as a
      // missing value of --output.
      out.push_back(i + 1 < args.size() ? absl::StrCat("--output=", args[++i])
                                        : "--output");
    } else {
      absl::string_view value = absl::string_view(arg).substr(2);
      absl::ConsumePrefix(&value, "=");
      out.push_back(absl::StrCat("--output=", value));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckFlagArgs(
    const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // A positional argument.
    absl::string_view spelled = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t equals = spelled.find('=');
    absl::string_view name = spelled.substr(0, equals);
    const bool has_value = equals != absl::string_view::npos;
    if (name.empty()) continue;
    if (absl::c_linear_search(kAbseilBuiltinFlags, name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string value =
        has_value ? std::string(spelled.substr(equals + 1)) : "";
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      // --nofoo negates the bool flag --foo, and takes no value.
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && !has_value) {
        flag = negated;
        value = "false";
      }
    } else if (flag != nullptr && !has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];  // --name value
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": missing value"));
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->Name(), "=", value, ": ", Expected(*flag)));
    }
    names.emplace_back(flag->Name());
  }
  return names;
}

}  // namespace pshard::cli
