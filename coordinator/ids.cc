#include "coordinator/ids.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pshard {
namespace coordinator {
namespace {

constexpr char kWorkerPrefix[] = "w-";
constexpr char kJobPrefix[] = "job-";

std::optional<int64_t> ParseId(absl::string_view id, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&id, prefix) || id.empty() || id.size() > 18) {
    return std::nullopt;
  }
  // Canonical decimal only ("w-01" and "w-+1" are not "w-1").
  if (id[0] == '0') return std::nullopt;
  int64_t n = 0;
  for (char c : id) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

std::string WorkerId(int64_t num) { return absl::StrCat(kWorkerPrefix, num); }
std::string JobId(int64_t num) { return absl::StrCat(kJobPrefix, num); }

std::optional<int64_t> ParseWorkerId(absl::string_view id) {
  return ParseId(id, kWorkerPrefix);
}

std::optional<int64_t> ParseJobId(absl::string_view id) {
  return ParseId(id, kJobPrefix);
}

std::string Clip(absl::string_view s, size_t max) {
  std::string out(s.substr(0, max));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = ' ';
  }
  return out;
}

}  // namespace coordinator
}  // namespace pshard
