// Abseil flags as pshard's binaries present them. By default Abseil's --help
// lists only flags defined in a file named after the program
// (pshard-coordinator.cc), so `pshard-coordinator --help` found none ("No
// flags matched"); and --version printed only the program name. Each main()
// calls SetUpBinaryFlags before absl::ParseCommandLine.
#ifndef PSHARD_COMMON_BINARY_FLAGS_H_
#define PSHARD_COMMON_BINARY_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pshard {

// Sets the usage message (`usage`, shown first by --help) and Abseil's usage
// config: --help and --helpshort list the flags defined in `main_file` (the
// caller's __FILE__) and in `shared_flag_files` (flags several binaries
// define once, e.g. security/transport_flags.cc), --version prints
// VersionLine(program).
void SetUpBinaryFlags(absl::string_view program, absl::string_view usage,
                      absl::string_view main_file,
                      std::vector<std::string> shared_flag_files = {});

// "pshard-coordinator 0.1.0\n": `program` and kPshardVersion.
std::string VersionLine(absl::string_view program);

}  // namespace pshard

#endif  // PSHARD_COMMON_BINARY_FLAGS_H_
