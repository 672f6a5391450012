#include "worker/runtime/output_writer.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "worker/io/safetensors.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(OutputWriterTest, WritesEveryParameterWithItsShape) {
  const std::string dir = testing::MakeTempDir("output_writer") + "/out";
  const std::vector<ParameterInfo> params = {{"w", {2, 3}, 6}, {"b", {}, 2}};
  const std::vector<std::vector<float>> values = {{1, 2, 3, 4, 5, 6}, {7, 8}};
  ASSERT_OK_AND_ASSIGN(std::string path, WriteJobOutput(dir, params, values));
  EXPECT_EQ(path, dir + "/params.safetensors");
  EXPECT_EQ(path, JobOutputPath(dir));

  ASSERT_OK_AND_ASSIGN(std::vector<SafetensorsTensor> read,
                       ReadSafetensors(path));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].name, "w");
  EXPECT_THAT(read[0].shape, ElementsAre(2, 3));
  EXPECT_THAT(read[0].data, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_EQ(read[1].name, "b");
  // A parameter without a shape is written as a vector of its elements.
  EXPECT_THAT(read[1].shape, ElementsAre(2));
  EXPECT_THAT(read[1].data, ElementsAre(7, 8));
}

TEST(OutputWriterTest, ReplacesAnEarlierOutput) {
  const std::string dir = testing::MakeTempDir("output_writer");
  const std::vector<ParameterInfo> params = {{"w", {2}, 2}};
  ASSERT_OK(WriteJobOutput(dir, params, {{1, 2}}).status());
  ASSERT_OK_AND_ASSIGN(std::string path, WriteJobOutput(dir, params, {{3, 4}}));
  ASSERT_OK_AND_ASSIGN(std::vector<SafetensorsTensor> read,
                       ReadSafetensors(path));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_THAT(read[0].data, ElementsAre(3, 4));
}

TEST(OutputWriterTest, ValuesThatDoNotMatchTheShapeAreAnError) {
  const std::string dir = testing::MakeTempDir("output_writer");
  EXPECT_THAT(WriteJobOutput(dir, {{"w", {2, 2}, 4}}, {{1, 2, 3}}),
              StatusIs(absl::StatusCode::kInternal,
                       "parameter w has 3 values for its shape of 4"));
  EXPECT_THAT(WriteJobOutput(dir, {{"w", {2}, 2}}, {}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("1 parameters")));
}

TEST(OutputWriterTest, AMissingParentDirectoryIsAnError) {
  const std::string dir =
      testing::MakeTempDir("output_writer") + "/no/such/parent";
  EXPECT_THAT(WriteJobOutput(dir, {{"w", {1}, 1}}, {{1}}),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("cannot create output directory")));
}

}  // namespace
}  // namespace pshard::worker
