#include "coordinator/paging.h"

#include "absl/strings/escaping.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

TEST(PagingTest, PageSizeDefaultsAndCaps) {
  const PageLimits limits{500, 1000};
  ASSERT_OK_AND_ASSIGN(int size, ResolvePageSize(0, limits));
  EXPECT_EQ(size, 500);
  ASSERT_OK_AND_ASSIGN(size, ResolvePageSize(7, limits));
  EXPECT_EQ(size, 7);
  ASSERT_OK_AND_ASSIGN(size, ResolvePageSize(5000, limits));
  EXPECT_EQ(size, 1000);
  EXPECT_THAT(ResolvePageSize(-1, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_size: must be >= 0, got -1")));
}

TEST(PagingTest, TokensRoundTripAndAreBoundToListAndFilter) {
  const std::string token = EncodePageToken("workers", "lost=0", 42);
  EXPECT_EQ(token.find('|'), std::string::npos);  // opaque
  ASSERT_OK_AND_ASSIGN(int64_t last, DecodePageToken(token, "workers", "lost=0"));
  EXPECT_EQ(last, 42);
  EXPECT_THAT(DecodePageToken(token, "workers", "lost=1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: made with other filters")));
  EXPECT_THAT(DecodePageToken(token, "jobs", "lost=0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: not a page token")));
  for (const std::string& bad :
       {std::string("garbage!"), absl::WebSafeBase64Escape("workers|lost=0|x"),
        absl::WebSafeBase64Escape("workers|lost=0|-3"),
        absl::WebSafeBase64Escape("workers|lost=0"), std::string(2000, 'A')}) {
    EXPECT_THAT(DecodePageToken(bad, "workers", "lost=0"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("page_token: not a page token")))
        << bad;
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
