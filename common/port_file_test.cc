#include "common/port_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(PortFileTest, RoundTrips) {
  const std::string path = TempPath("roundtrip.port");
  ASSERT_OK(WritePortFile(path, 43210));
  EXPECT_THAT(ReadPortFile(path), IsOk());
  EXPECT_EQ(*ReadPortFile(path), 43210);
  ASSERT_OK(WritePortFile(path, 7070));  // replaces, atomically
  EXPECT_EQ(*ReadPortFile(path), 7070);
}

TEST(PortFileTest, MissingOrGarbageIsNotFound) {
  EXPECT_THAT(ReadPortFile(TempPath("missing.port")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not written yet")));
  const std::string path = TempPath("garbage.port");
  std::ofstream(path) << "70000\n";
  EXPECT_THAT(ReadPortFile(path), StatusIs(absl::StatusCode::kNotFound,
                                           HasSubstr("does not hold a port")));
}

TEST(PortFileTest, UnwritableDirectoryIsAnError) {
  EXPECT_THAT(WritePortFile("/nonexistent-dir/x.port", 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("/nonexistent-dir")));
}

}  // namespace
}  // namespace pshard
