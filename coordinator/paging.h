// Paging of List methods the way Google APIs do it (AIP-158): a page size
// with a default and a maximum, and an opaque page token that says where the
// previous page stopped and which filters it was made with, so that a token
// used with other filters, or made up, is refused with InvalidArgument.
//
// A token is the web-safe base64 of "<list>|<filter>|<last key>": opaque to
// clients, not a secret (it only lets a client resume a listing it could
// make anyway).
#ifndef PSHARD_COORDINATOR_PAGING_H_
#define PSHARD_COORDINATOR_PAGING_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard {
namespace coordinator {

struct PageLimits {
  int default_size;
  int max_size;
};

// The page size to use for a requested `page_size`: `limits.default_size`
// for 0, at most `limits.max_size`.
// Errors: InvalidArgument ("page_size: ...") if negative.
absl::StatusOr<int> ResolvePageSize(int page_size, PageLimits limits);

// The token for the page after the one that ended at `last_key`, for the
// listing `list` (e.g. "workers") made with `filter`.
std::string EncodePageToken(absl::string_view list, absl::string_view filter,
                            int64_t last_key);

// The last key of the previous page.
// Errors: InvalidArgument ("page_token: ...") if `token` is not one that
// EncodePageToken made for `list` and `filter`.
absl::StatusOr<int64_t> DecodePageToken(absl::string_view token,
                                        absl::string_view list,
                                        absl::string_view filter);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_PAGING_H_
