// The coordinator's ids and the text it echoes from clients.
//
// Workers are "w-<n>" and jobs "job-<n>", n >= 1 in canonical decimal (so
// "w-01" and "w-+1" name nothing). Client text put into an error message
// goes through Clip: bounded, and control characters blanked.
#ifndef PSHARD_COORDINATOR_IDS_H_
#define PSHARD_COORDINATOR_IDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace pshard {
namespace coordinator {

std::string WorkerId(int64_t num);
std::string JobId(int64_t num);
// The n of "w-<n>" / "job-<n>", or nullopt for anything else.
std::optional<int64_t> ParseWorkerId(absl::string_view id);
std::optional<int64_t> ParseJobId(absl::string_view id);

// Printable, bounded text for messages that echo client input.
std::string Clip(absl::string_view s, size_t max = 1024);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_IDS_H_
