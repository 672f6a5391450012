#include "worker/workload/replay_workload.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "worker/io/safetensors.h"
#include "worker/workload/recording_sink.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::MakeTempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ReplayWorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("replay");
    ASSERT_TRUE(std::filesystem::create_directory(dir_ + "/grads"));
    // Written in this order, so "layers.2.weight" has the lowest offset.
    ASSERT_OK(WriteSafetensorsAtomic(
        dir_ + "/params.safetensors",
        {{"layers.2.weight", {2, 2}, w_}, {"layers.0.bias", {3}, b_}}));
    spec_.set_params_path(dir_ + "/params.safetensors");
    spec_.set_gradients_dir(dir_ + "/grads");
  }

  void WriteGrads(int step, int rank, std::vector<SafetensorsTensorView> tensors) {
    const std::string step_dir = absl::StrCat(dir_, "/grads/step-", step);
    std::filesystem::create_directories(step_dir);
    ASSERT_OK(WriteSafetensorsAtomic(
        absl::StrCat(step_dir, "/rank-", rank, ".safetensors"), tensors));
  }

  std::string dir_;
  v1::ReplayWorkload spec_;
  const std::vector<float> w_ = {1, 2, 3, 4};
  const std::vector<float> b_ = {-1, -2, -3};
  const std::vector<float> gw_ = {0.5f, 0.25f, 0.125f, 1};
  const std::vector<float> gb_ = {7, 8, 9};
};

TEST_F(ReplayWorkloadTest, ParametersInOffsetOrderAndGradientsByName) {
  ASSERT_OK_AND_ASSIGN(auto w, ReplayWorkload::Create(spec_, 1));
  const auto& p = w->parameters();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "layers.2.weight");
  EXPECT_THAT(p[0].shape, ElementsAre(2, 2));
  EXPECT_EQ(p[1].name, "layers.0.bias");
  EXPECT_EQ(p[1].numel, 3);

  std::vector<float> pw(4), pb(3), gw(4), gb(3);
  std::vector<float*> params = {pw.data(), pb.data()};
  ASSERT_OK(w->InitializeParameters(params));
  EXPECT_EQ(pw, w_);
  EXPECT_EQ(pb, b_);

  // The gradient file lists the tensors in another order: lookup is by name.
  WriteGrads(1, 1, {{"layers.0.bias", {3}, gb_}, {"layers.2.weight", {2, 2}, gw_}});
  std::vector<const float*> cparams = {pw.data(), pb.data()};
  std::vector<float*> grads = {gw.data(), gb.data()};
  RecordingSink sink(grads, {4, 3});
  ASSERT_OK_AND_ASSIGN(double loss, w->ComputeGradients(1, cparams, grads, sink));
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_EQ(gw, gw_);
  EXPECT_EQ(gb, gb_);
  EXPECT_THAT(sink.order, ElementsAre(1, 0));
  EXPECT_EQ(sink.snapshots[0], gb_);
  EXPECT_EQ(w->GradientPath(12), dir_ + "/grads/step-12/rank-1.safetensors");
}

TEST_F(ReplayWorkloadTest, BadGradientFilesNameFileAndTensor) {
  ASSERT_OK_AND_ASSIGN(auto w, ReplayWorkload::Create(spec_, 0));
  std::vector<float> pw(4), pb(3), gw(4), gb(3);
  std::vector<const float*> params = {pw.data(), pb.data()};
  std::vector<float*> grads = {gw.data(), gb.data()};
  RecordingSink sink;
  const std::string file1 = dir_ + "/grads/step-1/rank-0.safetensors";

  EXPECT_THAT(w->ComputeGradients(1, params, grads, sink),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(file1)));

  WriteGrads(1, 0, {{"layers.2.weight", {2, 2}, gw_}});
  EXPECT_THAT(w->ComputeGradients(1, params, grads, sink),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(file1 + " has no gradient for parameter 'layers.0.bias'")));

  WriteGrads(1, 0, {{"layers.2.weight", {4}, gw_}, {"layers.0.bias", {3}, gb_}});
  EXPECT_THAT(w->ComputeGradients(1, params, grads, sink),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gradient 'layers.2.weight' has shape [4], the parameter has [2, 2]")));

  WriteGrads(1, 0, {{"layers.2.weight", {2, 2}, gw_}, {"layers.0.bias", {3}, gb_},
                    {"extra", {3}, gb_}});
  EXPECT_THAT(w->ComputeGradients(1, params, grads, sink),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'extra'")));
  EXPECT_TRUE(sink.order.empty());  // nothing was signalled for bad files

  EXPECT_THAT(w->ComputeGradients(0, params, grads, sink),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1-based")));
}

TEST_F(ReplayWorkloadTest, MissingOrChangedParamsFile) {
  v1::ReplayWorkload missing = spec_;
  missing.set_params_path(dir_ + "/nope.safetensors");
  EXPECT_THAT(ReplayWorkload::Create(missing, 0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.safetensors")));
  v1::ReplayWorkload empty_dir = spec_;
  empty_dir.clear_gradients_dir();
  EXPECT_THAT(ReplayWorkload::Create(empty_dir, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gradients_dir")));

  ASSERT_OK_AND_ASSIGN(auto w, ReplayWorkload::Create(spec_, 0));
  ASSERT_OK(WriteSafetensorsAtomic(spec_.params_path(), {{"other", {4}, w_}}));
  std::vector<float> pw(4), pb(3);
  std::vector<float*> params = {pw.data(), pb.data()};
  EXPECT_THAT(w->InitializeParameters(params),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("changed")));
}

}  // namespace
}  // namespace pshard::worker
