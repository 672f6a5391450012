#include "coordinator/paging.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pshard {
namespace coordinator {

absl::StatusOr<int> ResolvePageSize(int page_size, PageLimits limits) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be >= 0, got ", page_size));
  }
  if (page_size == 0) return limits.default_size;
  return std::min(page_size, limits.max_size);
}

std::string EncodePageToken(absl::string_view list, absl::string_view filter,
                            int64_t last_key) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(list, "|", filter, "|", last_key));
}

absl::StatusOr<int64_t> DecodePageToken(absl::string_view token,
                                        absl::string_view list,
                                        absl::string_view filter) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token: ", why, "; pass the next_page_token of the previous ",
        list, " page, with the same filters"));
  };
  std::string raw;
  if (token.size() > 1024 || !absl::WebSafeBase64Unescape(token, &raw)) {
    return bad("not a page token");
  }
  std::vector<absl::string_view> parts = absl::StrSplit(raw, '|');
  int64_t last = 0;
  if (parts.size() != 3 || parts[0] != list ||
      !absl::SimpleAtoi(parts[2], &last) || last < 0) {
    return bad("not a page token");
  }
  if (parts[1] != filter) return bad("made with other filters");
  return last;
}

}  // namespace coordinator
}  // namespace pshard
