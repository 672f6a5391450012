// The version of pshard's binaries (pshard-coordinator, pshard-worker,
// pshardctl), printed by their --version. One constant for all three, raised
// with each release; the C API's own number is PSHARD_API_VERSION in
// worker/api/pshard.h.
#ifndef PSHARD_COMMON_VERSION_H_
#define PSHARD_COMMON_VERSION_H_

#include "absl/strings/string_view.h"

namespace pshard {

inline constexpr absl::string_view kPshardVersion = "0.1.0";

}  // namespace pshard

#endif  // PSHARD_COMMON_VERSION_H_
