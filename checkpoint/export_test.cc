#include "checkpoint/export.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/test_checkpoints.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::checkpoint {
namespace {

using ::pshard::checkpoint::testing::FlipByte;
using ::pshard::checkpoint::testing::MakeParameters;
using ::pshard::checkpoint::testing::WriteCheckpoint;
using ::pshard::testing::MakeTempDir;
using ::pshard::testing::ReadFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ExportTest, TwoAndThreeShardCheckpointsExportTheSameFile) {
  const auto params = MakeParameters(8, 40);
  const std::string two = MakeTempDir("two");
  const std::string three = MakeTempDir("three");
  ASSERT_OK(WriteCheckpoint(two, 40, 2, params).status());
  // Another owner layout: not i % 3, so the shards differ in every way.
  ASSERT_OK(WriteCheckpoint(three, 40, 3, params, {2, 2, 0, 1, 1, 0, 2, 0}).status());
  const std::string out2 = MakeTempDir("out") + "/two.safetensors";
  const std::string out3 = MakeTempDir("out") + "/three.safetensors";
  ASSERT_OK_AND_ASSIGN(ExportResult r2, ExportParameters(StepDirectory(two, 40), out2));
  ASSERT_OK_AND_ASSIGN(ExportResult r3, ExportParameters(three, out3));  // root: latest
  EXPECT_EQ(r2.step, 40);
  EXPECT_EQ(r3.step_dir, StepDirectory(three, 40));
  EXPECT_EQ(r2.parameters, 8);
  EXPECT_EQ(r2.file.sha256, r3.file.sha256);
  EXPECT_EQ(ReadFile(out2), ReadFile(out3));

  // Only the parameters, sorted by name, with their values and shapes.
  ASSERT_OK_AND_ASSIGN(auto reader, SafetensorsReader::Open(out2));
  ASSERT_EQ(reader->tensors().size(), params.size());
  EXPECT_EQ(reader->tensors()[0].name, "p0.weight");
  EXPECT_EQ(reader->metadata().at("format"), "pt");
  EXPECT_EQ(reader->metadata().at("pshard.step"), "40");
  for (const auto& p : params) {
    SCOPED_TRACE(p.name);
    const TensorInfo* info = reader->Find(p.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->shape, p.shape);
    ASSERT_OK_AND_ASSIGN(std::string bytes, reader->ReadBytes(p.name));
    EXPECT_EQ(bytes, std::string(reinterpret_cast<const char*>(p.value.data()),
                                 p.value.size() * 4));
    EXPECT_EQ(reader->Find(p.name + ".exp_avg"), nullptr);
  }
}

TEST(ExportTest, RefusesACorruptCheckpointNamingTheFileAndWritesNothing) {
  const std::string root = MakeTempDir("bad");
  ASSERT_OK(WriteCheckpoint(root, 5, 2, MakeParameters(3, 5)).status());
  const std::string shard = absl::StrCat(StepDirectory(root, 5), "/", ShardFileName(1, 2));
  FlipByte(shard, -2);
  const std::string out = MakeTempDir("out") + "/x.safetensors";
  EXPECT_THAT(ExportParameters(StepDirectory(root, 5), out),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(shard), HasSubstr("corrupted"))));
  EXPECT_THAT(ExportParameters(root, out),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no complete checkpoint"), HasSubstr(shard))));
  EXPECT_THAT(SafetensorsReader::Open(out), StatusIs(absl::StatusCode::kNotFound, HasSubstr(out)));
}

}  // namespace
}  // namespace pshard::checkpoint
