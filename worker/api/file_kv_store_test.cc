#include "worker/api/file_kv_store.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

std::string FreshDirectory() {
  std::string pattern =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/kv.XXXXXX");
  return mkdtemp(pattern.data());
}

TEST(FileKvStoreTest, AValuePutByOneStoreIsReadByAnotherOverTheSameDirectory) {
  const std::string dir = FreshDirectory();
  FileKvStore writer(dir);
  FileKvStore reader(dir);
  const std::string binary("a\0b/c", 5);
  ASSERT_OK(writer.Put("pshard/program/comm/rank/0", binary));
  ASSERT_OK_AND_ASSIGN(std::string first,
                       reader.Get("pshard/program/comm/rank/0", absl::Seconds(1)));
  EXPECT_EQ(first, binary);
  ASSERT_OK(writer.Put("pshard/program/comm/rank/0", "replaced"));
  ASSERT_OK_AND_ASSIGN(std::string second,
                       reader.Get("pshard/program/comm/rank/0", absl::Seconds(1)));
  EXPECT_EQ(second, "replaced");
}

TEST(FileKvStoreTest, KeysAreEscapedIntoOneFileNameInTheDirectory) {
  FileKvStore store("/d");
  EXPECT_EQ(store.PathOf("a/b c.d_e-f"), "/d/a%2Fb%20c.d_e-f");
  EXPECT_EQ(store.PathOf("../x"), "/d/..%2Fx");
}

TEST(FileKvStoreTest, AMissingKeyFailsAtItsDeadlineNamingKeyAndDirectory) {
  FakeClock clock;
  clock.set_advance_on_sleep(true);
  const std::string dir = FreshDirectory();
  FileKvStore store(dir, clock);
  const absl::Time start = clock.Now();
  EXPECT_THAT(store.Get("never", absl::Seconds(3)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(absl::StrCat("\"never\" did not appear in ",
                                              dir))));
  EXPECT_GE(clock.Now() - start, absl::Seconds(3));
}

TEST(FileKvStoreTest, PutIntoAMissingDirectoryIsUnavailable) {
  FileKvStore store("/nonexistent/pshard-kv");
  EXPECT_THAT(store.Put("k", "v"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("/nonexistent/pshard-kv/k")));
}

}  // namespace
}  // namespace pshard::worker
