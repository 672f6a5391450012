// The C API's boundary: every argument checked, the right code and last
// error for each misuse, on one local-mode rank.
#include "worker/api/pshard.h"

#include <math.h>
#include <stdlib.h>

#include <string.h>

#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string LastError() { return pshardGetLastError(); }

// The environment of rank 0 of 1 in the local test mode, in a fresh
// rendezvous directory.
void SetLocalEnvironment() {
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/c.XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  unsetenv("PSHARD_COORDINATOR");
  setenv("PSHARD_LOCAL_STORE", dir.c_str(), 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
}

class PshardCTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLocalEnvironment();
    unsetenv("PSHARD_OVERLAP_PARAM_BROADCAST");
    setenv("PSHARD_COLLECTIVE_TIMEOUT_SECONDS", "10", 1);
    ASSERT_EQ(pshardSessionOpen(&session_), pshardSuccess) << LastError();
  }
  void TearDown() override {
    EXPECT_EQ(pshardSessionClose(session_), pshardSuccess) << LastError();
  }

  // Sets `optimizer_json`, registers "w" (`numel` fp32 elements in host
  // memory) and prepares.
  void PrepareOneParameter(const char* optimizer_json, int64_t numel = 4) {
    ASSERT_EQ(pshardSetOptimizer(session_, optimizer_json), pshardSuccess)
        << LastError();
    const int64_t shape[] = {numel};
    int index = -1;
    ASSERT_EQ(pshardRegisterParameter(session_, "w", 1, shape, pshardFloat32,
                                      pshardHostMemory, &index),
              pshardSuccess);
    ASSERT_EQ(pshardPrepare(session_), pshardSuccess) << LastError();
  }

  // One step of "w" (parameter 0) with every gradient element 1.
  void StepWithGradientOne() {
    void* pointer = nullptr;
    int64_t numel = 0;
    ASSERT_EQ(pshardGetGradient(session_, 0, &pointer, &numel),
              pshardSuccess);
    for (int i = 0; i < numel; ++i) static_cast<float*>(pointer)[i] = 1;
    ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
    ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  }

  // The session's optimizer-state export, which must hold one entry, and
  // that entry (its pointers valid until the export is freed, by the test).
  struct StateEntry {
    const char* parameter = nullptr;
    const char* key = nullptr;
    int64_t step = 0;
    const float* data = nullptr;
    int64_t numel = 0;
  };
  void ExportTheOneEntry(pshardOptimizerState_t* state, StateEntry* entry) {
    ASSERT_EQ(pshardExportOptimizerState(session_, state), pshardSuccess)
        << LastError();
    int count = 0;
    ASSERT_EQ(pshardOptimizerStateNumEntries(*state, &count), pshardSuccess);
    ASSERT_EQ(count, 1);
    ASSERT_EQ(pshardOptimizerStateGetEntry(*state, 0, &entry->parameter,
                                           &entry->key, &entry->step,
                                           &entry->data, &entry->numel),
              pshardSuccess)
        << LastError();
  }

  pshardSession_t session_ = nullptr;
};

TEST_F(PshardCTest, NullHandlesAndOutputsAreInvalidArguments) {
  int index = 0;
  const int64_t shape[] = {2};
  EXPECT_EQ(pshardSessionOpen(nullptr), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("pshardSessionOpen: session is NULL"));
  EXPECT_EQ(pshardRegisterParameter(nullptr, "w", 1, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("session is NULL"));
  EXPECT_EQ(pshardRegisterParameter(session_, nullptr, 1, shape,
                                    pshardFloat32, pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("name is NULL"));
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 1, nullptr, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("shape is NULL"));
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 1, shape, pshardFloat32,
                                    pshardHostMemory, nullptr),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("index is NULL"));
  EXPECT_EQ(pshardSetOptimizer(session_, nullptr), pshardInvalidArgument);
  EXPECT_EQ(pshardFinishStep(nullptr), pshardInvalidArgument);
  EXPECT_EQ(pshardSessionRank(session_, nullptr), pshardInvalidArgument);
  EXPECT_EQ(pshardAverageLoss(session_, 1.0, nullptr), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("mean is NULL"));
  EXPECT_EQ(pshardBroadcast(session_, nullptr, 4, 0), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("pshardBroadcast: data"));
  char byte = 'x';
  EXPECT_EQ(pshardBroadcast(session_, &byte, -1, 0), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("size must be >= 0, got -1"));
  EXPECT_EQ(pshardBroadcast(session_, &byte, 1, 1), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("root: must be a rank in [0, 1)"));
  EXPECT_EQ(pshardBroadcast(session_, &byte, 1, 0), pshardSuccess);
  EXPECT_EQ(pshardBroadcast(session_, nullptr, 0, 0), pshardSuccess);
  EXPECT_EQ(byte, 'x');
  EXPECT_EQ(pshardSessionClose(nullptr), pshardSuccess);
  int rank = -1, world = -1;
  EXPECT_EQ(pshardSessionRank(session_, &rank), pshardSuccess);
  EXPECT_EQ(pshardSessionWorldSize(session_, &world), pshardSuccess);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(world, 1);
}

TEST_F(PshardCTest, BadDtypeMemoryShapeAndEnumsAreRefused) {
  int index = 0;
  const int64_t shape[] = {2, 3};
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 2, shape,
                                    static_cast<pshardDataType_t>(7),
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("dtype 7 is not a pshardDataType_t"));
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 2, shape, pshardFloat32,
                                    static_cast<pshardMemory_t>(5), &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("memory 5 is not a pshardMemory_t"));
  // Every int is a value of the enum (pshard.h): a negative one is refused
  // by the same check, with no undefined behaviour on the way.
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 2, shape, pshardFloat32,
                                    static_cast<pshardMemory_t>(-1), &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("memory -1 is not a pshardMemory_t"));
  EXPECT_EQ(pshardSetCudaDevice(session_, -1, nullptr), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("CUDA device: must be >= 0, got -1"));
  EXPECT_EQ(pshardRegisterParameter(session_, "w", -1, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("ndim must be in [0, 16], got -1"));
  const int64_t zero[] = {2, 0};
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 2, zero, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("shape[1] is 0"));
  EXPECT_EQ(pshardRegisterParameter(session_, "", 2, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("parameter name"));
  EXPECT_EQ(pshardSetCommMode(session_, static_cast<pshardCommMode_t>(9)),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("mode 9 is not a pshardCommMode_t"));
  EXPECT_EQ(pshardSetBucketCapMb(session_, 0), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("bucket_cap_mb"));
  EXPECT_EQ(pshardSetBucketCapMb(session_, NAN), pshardInvalidArgument);
}

TEST_F(PshardCTest, BadOptimizerJsonNamesTheField) {
  EXPECT_EQ(pshardSetOptimizer(session_, "{\"kind\": \"adam\", "
                                         "\"hyper_parameters\": {\"lr\": -1}}"),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.hyper_parameters.lr"));
  EXPECT_EQ(pshardSetOptimizer(
                session_,
                "{\"kind\": \"sgd\", \"hyper_parameters\": {\"lr\": 0.1},"
                " \"param_groups\": [{\"params\": []}]}"),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.param_groups[0].params"));
  EXPECT_EQ(pshardSetOptimizer(session_, "{\"kind\": \"adam\", \"lr\": 1}"),
            pshardInvalidArgument);
  // A misplaced field is named by its path, never by protobuf's type name.
  EXPECT_THAT(LastError(), HasSubstr("optimizer.lr: unknown field"));
  EXPECT_THAT(LastError(), Not(HasSubstr("OptimizerSpec")));
  EXPECT_EQ(pshardSetOptimizer(session_, R"({"kind": "SGD",
                "hyper_parameters": {"lr": 0.25}, "max_grad_norm": -1})"),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.max_grad_norm: must be finite "
                                     "and > 0, got -1"));
  EXPECT_EQ(pshardSetOptimizer(session_, R"({"kind": "SGD",
                "hyper_parameters": {"lr": 0.25}, "max_grad_norm": 1,
                "norm_type": 3})"),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.norm_type: must be 2 or "
                                     "infinity"));
  EXPECT_EQ(pshardSetOptimizer(session_, "not json"), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("JSON syntax error"));
}

TEST_F(PshardCTest, WrongCallOrderIsInvalidUsageAndAStepWorks) {
  void* data = nullptr;
  int64_t numel = 0;
  EXPECT_EQ(pshardGetParameter(session_, 0, &data, &numel),
            pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("not prepared"));
  EXPECT_EQ(pshardFinishStep(session_), pshardInvalidUsage);
  EXPECT_EQ(pshardGradientReady(session_, 0), pshardInvalidUsage);
  EXPECT_EQ(pshardPrepare(session_), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer: not set"));
  ASSERT_EQ(pshardSetOptimizer(
                session_, "{\"kind\": \"SGD\", \"hyper_parameters\": "
                          "{\"lr\": 0.25}}"),
            pshardSuccess);
  EXPECT_EQ(pshardPrepare(session_), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("no parameters registered"));
  const int64_t shape[] = {3, 2};
  int index = -1;
  ASSERT_EQ(pshardRegisterParameter(session_, "w", 2, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardSuccess)
      << LastError();
  EXPECT_EQ(index, 0);
  EXPECT_EQ(pshardRegisterParameter(session_, "w", 2, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("\"w\" is registered twice"));
  ASSERT_EQ(pshardPrepare(session_), pshardSuccess) << LastError();
  EXPECT_EQ(pshardPrepare(session_), pshardInvalidUsage);
  EXPECT_EQ(pshardSetBucketCapMb(session_, 1), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("already prepared"));

  EXPECT_EQ(pshardGetParameter(session_, 1, &data, &numel),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("index 1 is not a parameter index"));
  EXPECT_EQ(pshardGetParameter(session_, 0, nullptr, &numel),
            pshardInvalidArgument);
  ASSERT_EQ(pshardGetParameter(session_, 0, &data, &numel), pshardSuccess);
  ASSERT_EQ(numel, 6);
  float* params = static_cast<float*>(data);
  for (int i = 0; i < 6; ++i) params[i] = static_cast<float>(i);
  ASSERT_EQ(pshardGetGradient(session_, 0, &data, &numel), pshardSuccess);
  float* grads = static_cast<float*>(data);
  for (int i = 0; i < 6; ++i) grads[i] = 4;
  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  EXPECT_EQ(pshardGradientReady(session_, 0), pshardInvalidUsage);
  EXPECT_EQ(pshardGradientReady(session_, 5), pshardInvalidArgument);
  ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  ASSERT_EQ(pshardGetParameter(session_, 0, &data, &numel), pshardSuccess);
  params = static_cast<float*>(data);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(params[i], i - 1.0f);
  int64_t steps = 0;
  ASSERT_EQ(pshardStepsFinished(session_, &steps), pshardSuccess);
  EXPECT_EQ(steps, 1);
  int buckets = 0, owned[4] = {-1, -1, -1, -1}, count = 0;
  ASSERT_EQ(pshardNumBuckets(session_, &buckets), pshardSuccess);
  ASSERT_EQ(pshardOwnedBuckets(session_, owned, 4, &count), pshardSuccess);
  EXPECT_EQ(buckets, 1);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(owned[0], 0);
  EXPECT_EQ(pshardReportProgress(session_, 0, 1.0, 4), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("step: must be >= 1"));
  EXPECT_EQ(pshardReportProgress(session_, 1, 1.0, 4), pshardSuccess);
  // No clipping: no norm.
  double norm = -1;
  int known = -1;
  ASSERT_EQ(pshardLastGradNorm(session_, &norm, &known), pshardSuccess);
  EXPECT_EQ(known, 0);
  EXPECT_EQ(pshardLastGradNorm(session_, nullptr, &known),
            pshardInvalidArgument);
  EXPECT_EQ(pshardLastGradNorm(session_, &norm, nullptr),
            pshardInvalidArgument);
}

// overlap_param_broadcast: the setter's and waiter's arguments are checked,
// the setting is the environment's until set and frozen by pshardPrepare,
// and with it on, each parameter waited for holds the step's update (SGD
// lr 0.25 on gradients 4: every value goes down by 1 each step).
TEST_F(PshardCTest, OverlapParamBroadcastIsCheckedAndWaitsForTheUpdate) {
  int enabled = -1;
  EXPECT_EQ(pshardSetOverlapParamBroadcast(nullptr, 1), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("session is NULL"));
  EXPECT_EQ(pshardSetOverlapParamBroadcast(session_, 2),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("enable must be 0 or 1, got 2"));
  EXPECT_EQ(pshardSetOverlapParamBroadcast(session_, -1),
            pshardInvalidArgument);
  EXPECT_EQ(pshardGetOverlapParamBroadcast(session_, nullptr),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("enabled is NULL"));
  EXPECT_EQ(pshardGetOverlapParamBroadcast(nullptr, &enabled),
            pshardInvalidArgument);
  ASSERT_EQ(pshardGetOverlapParamBroadcast(session_, &enabled), pshardSuccess);
  EXPECT_EQ(enabled, 0);  // PSHARD_OVERLAP_PARAM_BROADCAST is not set
  EXPECT_EQ(pshardWaitParameter(session_, 0), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("not prepared yet"));
  EXPECT_EQ(pshardWaitParameter(nullptr, 0), pshardInvalidArgument);

  ASSERT_EQ(pshardSetOverlapParamBroadcast(session_, 1), pshardSuccess);
  ASSERT_EQ(pshardGetOverlapParamBroadcast(session_, &enabled), pshardSuccess);
  EXPECT_EQ(enabled, 1);
  ASSERT_EQ(pshardSetOptimizer(
                session_, R"({"kind": "SGD", "hyper_parameters": {"lr": 0.25}})"),
            pshardSuccess);
  ASSERT_EQ(pshardSetBucketCapMb(session_, 0.00001), pshardSuccess);
  const int64_t shape[] = {3};
  int index = -1;
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(pshardRegisterParameter(session_, name, 1, shape, pshardFloat32,
                                      pshardHostMemory, &index),
              pshardSuccess);
  }
  ASSERT_EQ(pshardPrepare(session_), pshardSuccess) << LastError();
  EXPECT_EQ(pshardSetOverlapParamBroadcast(session_, 0), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("already prepared"));
  EXPECT_EQ(pshardWaitParameter(session_, 2), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("index 2 is not a parameter index"));
  EXPECT_EQ(pshardWaitParameter(session_, -1), pshardInvalidArgument);
  // Before the first step there is nothing to wait for.
  EXPECT_EQ(pshardWaitParameter(session_, 1), pshardSuccess) << LastError();
  void* data = nullptr;
  int64_t numel = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(pshardGetParameter(session_, i, &data, &numel), pshardSuccess);
    for (int e = 0; e < 3; ++e) static_cast<float*>(data)[e] = 10.0f * i + e;
  }
  for (int step = 1; step <= 3; ++step) {
    // Gradients become ready in the reverse of registration order; the
    // "forward" below reads parameter 1 first.
    for (int i : {1, 0}) {
      ASSERT_EQ(pshardGetGradient(session_, i, &data, &numel), pshardSuccess);
      for (int e = 0; e < 3; ++e) static_cast<float*>(data)[e] = 4;
      ASSERT_EQ(pshardGradientReady(session_, i), pshardSuccess);
    }
    ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
    for (int i : {1, 0}) {
      ASSERT_EQ(pshardWaitParameter(session_, i), pshardSuccess)
          << LastError();
      ASSERT_EQ(pshardWaitParameter(session_, i), pshardSuccess);  // again
      ASSERT_EQ(pshardGetParameter(session_, i, &data, &numel), pshardSuccess);
      for (int e = 0; e < 3; ++e) {
        EXPECT_FLOAT_EQ(static_cast<float*>(data)[e], 10.0f * i + e - step)
            << "parameter " << i << " step " << step;
      }
    }
  }
}

// The job spec's overlap_param_broadcast (the agent's
// PSHARD_OVERLAP_PARAM_BROADCAST) is a session's default; a bad value is
// refused naming the variable.
TEST(PshardCOpenTest, OverlapDefaultsToTheEnvironment) {
  SetLocalEnvironment();
  setenv("PSHARD_OVERLAP_PARAM_BROADCAST", "yes", 1);
  pshardSession_t session = nullptr;
  EXPECT_EQ(pshardSessionOpen(&session), pshardInvalidArgument);
  EXPECT_THAT(LastError(),
              HasSubstr("PSHARD_OVERLAP_PARAM_BROADCAST: must be 0 or 1"));
  EXPECT_EQ(session, nullptr);
  setenv("PSHARD_OVERLAP_PARAM_BROADCAST", "1", 1);
  ASSERT_EQ(pshardSessionOpen(&session), pshardSuccess) << LastError();
  int enabled = -1;
  ASSERT_EQ(pshardGetOverlapParamBroadcast(session, &enabled), pshardSuccess);
  EXPECT_EQ(enabled, 1);
  ASSERT_EQ(pshardSetOverlapParamBroadcast(session, 0), pshardSuccess);
  ASSERT_EQ(pshardGetOverlapParamBroadcast(session, &enabled), pshardSuccess);
  EXPECT_EQ(enabled, 0);
  EXPECT_EQ(pshardSessionClose(session), pshardSuccess);
  unsetenv("PSHARD_OVERLAP_PARAM_BROADCAST");
}

// The precision's default is the environment's (the job spec's, set by the
// agent), checked; a program may set its own before registering, and every
// parameter has the param_dtype.
TEST(PshardCOpenTest, PrecisionDefaultsToTheEnvironmentAndBindsTheDtype) {
  SetLocalEnvironment();
  setenv("PSHARD_PARAM_DTYPE", "bf16", 1);
  pshardSession_t session = nullptr;
  EXPECT_EQ(pshardSessionOpen(&session), pshardInvalidArgument);
  EXPECT_THAT(LastError(),
              HasSubstr("PSHARD_PARAM_DTYPE: must be FP32 or BF16, got "
                        "\"bf16\""));
  setenv("PSHARD_PARAM_DTYPE", "BF16", 1);
  ASSERT_EQ(pshardSessionOpen(&session), pshardSuccess) << LastError();
  unsetenv("PSHARD_PARAM_DTYPE");
  pshardDataType_t param = pshardNumDataTypes, reduce = pshardNumDataTypes;
  ASSERT_EQ(pshardGetPrecision(session, &param, &reduce), pshardSuccess);
  EXPECT_EQ(param, pshardBFloat16);
  EXPECT_EQ(reduce, pshardFloat32);
  EXPECT_EQ(pshardGetPrecision(session, nullptr, &reduce),
            pshardInvalidArgument);
  EXPECT_EQ(pshardSetPrecision(session, static_cast<pshardDataType_t>(5),
                               pshardFloat32),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("param_dtype 5 is not a pshardDataType_t"));

  const int64_t shape[] = {3};
  int index = -1;
  EXPECT_EQ(pshardRegisterParameter(session, "w", 1, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("parameter \"w\": dtype FP32, but the "
                                     "session's param_dtype is BF16"));
  ASSERT_EQ(pshardSetPrecision(session, pshardFloat32, pshardBFloat16),
            pshardSuccess);
  ASSERT_EQ(pshardGetPrecision(session, &param, &reduce), pshardSuccess);
  EXPECT_EQ(param, pshardFloat32);
  EXPECT_EQ(reduce, pshardBFloat16);
  ASSERT_EQ(pshardRegisterParameter(session, "w", 1, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardSuccess)
      << LastError();
  EXPECT_EQ(pshardSetPrecision(session, pshardBFloat16, pshardBFloat16),
            pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("before registering parameters"));
  EXPECT_EQ(pshardSessionClose(session), pshardSuccess);
}

// bf16 parameters, fp32 reduction: the buffers hold bf16 parameters and
// fp32 gradients; the owner steps fp32 masters that start from
// pshardSetParameterFromFloat32's values and writes them rounded. The
// update (2^-9 a step) is below half a bf16 step at 1 (2^-8), so stepping
// the bf16 values themselves would never move them; the masters do.
TEST_F(PshardCTest, Bf16ParametersStepFp32MasterWeights) {
  ASSERT_EQ(pshardSetPrecision(session_, pshardBFloat16, pshardFloat32),
            pshardSuccess);
  ASSERT_EQ(pshardSetOptimizer(
                session_, "{\"kind\": \"SGD\", \"hyper_parameters\": "
                          "{\"lr\": 1}}"),
            pshardSuccess);
  const int64_t shape[] = {4};
  int index = -1;
  ASSERT_EQ(pshardRegisterParameter(session_, "w", 1, shape, pshardBFloat16,
                                    pshardHostMemory, &index),
            pshardSuccess)
      << LastError();
  ASSERT_EQ(pshardPrepare(session_), pshardSuccess) << LastError();
  const float start = 1.0f + 1.0f / 1024;  // not a bf16 value
  const float initial[4] = {start, start, start, start};
  EXPECT_EQ(pshardSetParameterFromFloat32(session_, 0, initial, 3),
            pshardInvalidArgument);
  EXPECT_EQ(pshardSetParameterFromFloat32(session_, 1, initial, 4),
            pshardInvalidArgument);
  EXPECT_EQ(pshardSetParameterFromFloat32(session_, 0, nullptr, 4),
            pshardInvalidArgument);
  ASSERT_EQ(pshardSetParameterFromFloat32(session_, 0, initial, 4),
            pshardSuccess)
      << LastError();
  // The bf16 buffer: 1 + 2^-10 rounded to nearest even is 1.
  auto widened = [&] {
    void* data = nullptr;
    int64_t numel = 0;
    EXPECT_EQ(pshardGetParameter(session_, 0, &data, &numel), pshardSuccess);
    EXPECT_EQ(numel, 4);
    std::vector<float> out(4);
    for (int i = 0; i < 4; ++i) {
      const uint32_t bits =
          static_cast<uint32_t>(static_cast<const uint16_t*>(data)[i]) << 16;
      memcpy(&out[i], &bits, sizeof(bits));
    }
    return out;
  };
  EXPECT_THAT(widened(), ::testing::Each(1.0f));
  float master = start;
  for (int step = 1; step <= 3; ++step) {
    void* data = nullptr;
    int64_t numel = 0;
    ASSERT_EQ(pshardGetGradient(session_, 0, &data, &numel), pshardSuccess);
    ASSERT_EQ(numel, 4);
    for (int i = 0; i < 4; ++i) static_cast<float*>(data)[i] = -1.0f / 512;
    ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
    ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
    master += 1.0f / 512;
    // Nearest bf16 of the master: 1 or 1 + 2^-7.
    const float nearest =
        master - 1.0f < 1.0f / 256 ? 1.0f : 1.0f + 1.0f / 128;
    EXPECT_THAT(widened(), ::testing::Each(nearest)) << "step " << step;
  }
  EXPECT_EQ(pshardSetParameterFromFloat32(session_, 0, initial, 4),
            pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("after the first step"));
}

// max_grad_norm in the OptimizerSpec JSON clips the step as torch's
// clip_grad_norm_ does, and pshardLastGradNorm gives the pre-clip norm.
TEST_F(PshardCTest, MaxGradNormClipsAndReportsTheNorm) {
  ASSERT_NO_FATAL_FAILURE(PrepareOneParameter(
      R"({"kind": "SGD", "hyper_parameters": {"lr": 0.25},
          "max_grad_norm": 1})",
      /*numel=*/6));
  double norm = -1;
  int known = -1;
  ASSERT_EQ(pshardLastGradNorm(session_, &norm, &known), pshardSuccess);
  EXPECT_EQ(known, 0);  // before the first step
  void* data = nullptr;
  int64_t numel = 0;
  ASSERT_EQ(pshardGetParameter(session_, 0, &data, &numel), pshardSuccess);
  for (int i = 0; i < 6; ++i) static_cast<float*>(data)[i] = 1;
  ASSERT_EQ(pshardGetGradient(session_, 0, &data, &numel), pshardSuccess);
  for (int i = 0; i < 6; ++i) static_cast<float*>(data)[i] = 4;
  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  ASSERT_EQ(pshardLastGradNorm(session_, &norm, &known), pshardSuccess);
  EXPECT_EQ(known, 1);
  EXPECT_NEAR(norm, std::sqrt(96.0), 1e-6);  // |(4, ..., 4)| over 6
  ASSERT_EQ(pshardGetParameter(session_, 0, &data, &numel), pshardSuccess);
  const float coef = static_cast<float>(1 / (std::sqrt(96.0) + 1e-6));
  EXPECT_FLOAT_EQ(static_cast<float*>(data)[0], 1 - 0.25f * (4 * coef));
}

// Export/import of the optimizer state: order, every argument, and the
// entries of an SGD-with-momentum parameter after one step.
TEST_F(PshardCTest, OptimizerStateExportAndImportCheckEveryArgument) {
  const char kSgd[] =
      "{\"kind\": \"SGD\", \"hyper_parameters\": {\"lr\": 0.5, "
      "\"momentum\": 0.9}}";
  ASSERT_EQ(pshardSetOptimizer(session_, kSgd), pshardSuccess);
  const int64_t shape[] = {4};
  int index = -1;
  ASSERT_EQ(pshardRegisterParameter(session_, "w", 1, shape, pshardFloat32,
                                    pshardHostMemory, &index),
            pshardSuccess);
  pshardOptimizerState_t state = nullptr;
  EXPECT_EQ(pshardExportOptimizerState(session_, &state), pshardInvalidUsage);
  EXPECT_EQ(state, nullptr);
  ASSERT_EQ(pshardPrepare(session_), pshardSuccess) << LastError();
  EXPECT_EQ(pshardExportOptimizerState(session_, &state), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("before the first step"));
  EXPECT_EQ(pshardExportOptimizerState(session_, nullptr),
            pshardInvalidArgument);

  // Import: bad arguments, checked before anything is kept.
  const float values[4] = {1, 2, 3, 4};
  const char* names[] = {"w"};
  const char* keys[] = {"momentum_buffer"};
  const int64_t steps[] = {7};
  const float* data[] = {values};
  const int64_t numels[] = {4};
  EXPECT_EQ(pshardImportOptimizerState(session_, nullptr, 1, names, keys,
                                       steps, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("optimizer_json is NULL"));
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, -1, names, keys, steps,
                                       data, numels),
            pshardInvalidArgument);
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, nullptr,
                                       steps, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("keys is NULL"));
  const char* unknown[] = {"v"};
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, unknown, keys,
                                       steps, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("'v', which is not registered"));
  const int64_t short_numel[] = {3};
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, keys, steps,
                                       data, short_numel),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("has 3 elements, the parameter 4"));
  EXPECT_EQ(pshardImportOptimizerState(
                session_, "{\"kind\": \"ADAM\"}", 1, names, keys, steps,
                data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("another optimizer"));

  // A good import: the first step resumes from momentum {1, 2, 3, 4} at
  // step 7 (so no first-step special case): buf = 0.9 * buf + grad.
  ASSERT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, keys, steps,
                                       data, numels),
            pshardSuccess)
      << LastError();
  int64_t numel = 0;
  StepWithGradientOne();
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, keys, steps,
                                       data, numels),
            pshardInvalidUsage);

  StateEntry entry;
  ASSERT_NO_FATAL_FAILURE(ExportTheOneEntry(&state, &entry));
  EXPECT_STREQ(entry.parameter, "w");
  EXPECT_STREQ(entry.key, "momentum_buffer");
  EXPECT_EQ(entry.step, 8);
  ASSERT_EQ(entry.numel, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(entry.data[i], 0.9f * (i + 1) + 1);
  }
  EXPECT_EQ(pshardOptimizerStateGetEntry(state, 1, &entry.parameter,
                                         &entry.key, &entry.step, &entry.data,
                                         &numel),
            pshardInvalidArgument);
  EXPECT_EQ(pshardOptimizerStateGetEntry(state, 0, nullptr, &entry.key,
                                         &entry.step, &entry.data, &numel),
            pshardInvalidArgument);
  int count = 0;
  const char* json = nullptr;
  ASSERT_EQ(pshardOptimizerStateSpec(state, &json), pshardSuccess);
  EXPECT_THAT(json, HasSubstr("SGD"));
  EXPECT_EQ(pshardOptimizerStateFree(state), pshardSuccess);
  EXPECT_EQ(pshardOptimizerStateFree(nullptr), pshardSuccess);
  EXPECT_EQ(pshardOptimizerStateNumEntries(nullptr, &count),
            pshardInvalidArgument);
}

// Plain SGD keeps no state: its export is one "step" entry per parameter
// (numel 0), which an import takes back (data NULL; from several ranks at
// once) so that the lr schedule resumes at the saved step. StepLR halves
// the lr each step: from step 7 the first update runs at 0.5^7.
TEST_F(PshardCTest, AParameterWithoutStateCarriesItsStep) {
  const char kSgd[] =
      R"({"kind": "SGD", "hyper_parameters": {"lr": 1,
          "lr_schedule": {"kind": "STEP", "step_size": 1, "gamma": 0.5}}})";
  PrepareOneParameter(kSgd);
  const char* names[] = {"w", "w"};
  const char* keys[] = {"step", "step"};
  const int64_t steps[] = {7, 7};
  const float* data[] = {nullptr, nullptr};
  const int64_t numels[] = {0, 0};
  const int64_t some[] = {1, 0};
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, keys, steps,
                                       data, some),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("numel must be 0, got 1"));
  ASSERT_EQ(pshardImportOptimizerState(session_, kSgd, 2, names, keys, steps,
                                       data, numels),
            pshardSuccess)
      << LastError();
  void* pointer = nullptr;
  int64_t numel = 0;
  ASSERT_EQ(pshardGetParameter(session_, 0, &pointer, &numel), pshardSuccess);
  for (int i = 0; i < 4; ++i) static_cast<float*>(pointer)[i] = 0;
  StepWithGradientOne();
  ASSERT_EQ(pshardGetParameter(session_, 0, &pointer, &numel), pshardSuccess);
  EXPECT_EQ(static_cast<float*>(pointer)[0], -0.0078125f);  // -(0.5^7)

  pshardOptimizerState_t state = nullptr;
  StateEntry entry;
  ASSERT_NO_FATAL_FAILURE(ExportTheOneEntry(&state, &entry));
  EXPECT_STREQ(entry.parameter, "w");
  EXPECT_STREQ(entry.key, "step");
  EXPECT_EQ(entry.step, 8);
  EXPECT_EQ(entry.numel, 0);
  EXPECT_NE(entry.data, nullptr);
  EXPECT_EQ(pshardOptimizerStateFree(state), pshardSuccess);
}

// pshardSetLearningRate (API 7): a group's rate from the next step on,
// replacing its schedule; between steps only; bad groups and rates refused
// with the session still usable. SGD without momentum, gradient 1: each step
// moves w by -lr.
TEST_F(PshardCTest, LearningRateSetBetweenStepsRunsFromTheNextStep) {
  const char kSgd[] =
      "{\"kind\": \"SGD\", \"hyper_parameters\": {\"lr\": 0.5, "
      "\"lr_schedule\": {\"kind\": \"STEP\", \"step_size\": 1, "
      "\"gamma\": 0.5}}, \"param_groups\": [{\"params\": [\"b*\"], "
      "\"hyper_parameters\": {\"lr\": 0.25}}]}";
  EXPECT_EQ(pshardSetLearningRate(session_, -1, 0.125), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("not prepared"));
  PrepareOneParameter(kSgd);
  void* pointer = nullptr;
  int64_t numel = 0;
  ASSERT_EQ(pshardGetParameter(session_, 0, &pointer, &numel), pshardSuccess);
  float* w = static_cast<float*>(pointer);
  for (int i = 0; i < 4; ++i) w[i] = 0;
  int group = 7;
  ASSERT_EQ(pshardParameterGroup(session_, 0, &group), pshardSuccess);
  EXPECT_EQ(group, -1);  // "w" matches no glob: the default group
  EXPECT_EQ(pshardParameterGroup(session_, 1, &group), pshardInvalidArgument);
  EXPECT_EQ(pshardParameterGroup(session_, 0, nullptr), pshardInvalidArgument);
  double lr = 0;
  ASSERT_EQ(pshardGetLearningRate(session_, -1, &lr), pshardSuccess);
  EXPECT_EQ(lr, 0.5);
  ASSERT_EQ(pshardGetLearningRate(session_, 0, &lr), pshardSuccess);
  EXPECT_EQ(lr, 0.25);
  EXPECT_EQ(pshardGetLearningRate(session_, 1, &lr), pshardInvalidArgument);

  StepWithGradientOne();  // the schedule's step 1: lr 0.5
  EXPECT_EQ(w[0], -0.5f);
  ASSERT_EQ(pshardGetLearningRate(session_, -1, &lr), pshardSuccess);
  EXPECT_EQ(lr, 0.5);  // the base, which the schedule halves at step 2

  EXPECT_EQ(pshardSetLearningRate(session_, 1, 0.125), pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("parameter group 1 does not exist"));
  EXPECT_EQ(pshardSetLearningRate(session_, -2, 0.125), pshardInvalidArgument);
  EXPECT_EQ(pshardSetLearningRate(session_, -1, 0), pshardInvalidArgument);
  EXPECT_THAT(LastError(),
              HasSubstr("optimizer.hyper_parameters.lr: must be in (0, "
                        "1e+06], got 0"));
  EXPECT_EQ(pshardSetLearningRate(session_, -1, nan("")),
            pshardInvalidArgument);
  EXPECT_EQ(pshardSetLearningRate(session_, -1, INFINITY),
            pshardInvalidArgument);

  // The schedule would give 0.25 at step 2; the set rate replaces it.
  ASSERT_EQ(pshardSetLearningRate(session_, -1, 0.125), pshardSuccess)
      << LastError();
  ASSERT_EQ(pshardGetLearningRate(session_, -1, &lr), pshardSuccess);
  EXPECT_EQ(lr, 0.125);
  StepWithGradientOne();
  EXPECT_EQ(w[0], -0.625f);

  // Mid-step: refused, and the step finishes at the rate it began with.
  ASSERT_EQ(pshardGetGradient(session_, 0, &pointer, &numel), pshardSuccess);
  for (int i = 0; i < numel; ++i) static_cast<float*>(pointer)[i] = 1;
  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  EXPECT_EQ(pshardSetLearningRate(session_, -1, 0.0625), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("between steps only"));
  ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  EXPECT_EQ(w[0], -0.75f);

  // Another group's rate leaves w's alone; it stays set until changed.
  ASSERT_EQ(pshardSetLearningRate(session_, 0, 8), pshardSuccess);
  StepWithGradientOne();
  EXPECT_EQ(w[0], -0.875f);
  ASSERT_EQ(pshardSetLearningRate(session_, -1, 0.0625), pshardSuccess);
  StepWithGradientOne();
  EXPECT_EQ(w[0], -0.9375f);
}

// pshardSetHyperParameters (API 8): what torch's schedulers change besides
// the lr (OneCycleLR's momentum), from the next step on, merged into what
// was set; refused with a message naming the field, the session still
// usable. SGD, lr 1, gradient 1: the momentum buffer b = m b + 1 (1 at step
// 1), and w -= b.
TEST_F(PshardCTest, HyperParametersSetBetweenStepsRunFromTheNextStep) {
  PrepareOneParameter(
      R"({"kind": "SGD", "hyper_parameters": {"lr": 1, "momentum": 0.5}})");
  void* pointer = nullptr;
  int64_t numel = 0;
  ASSERT_EQ(pshardGetParameter(session_, 0, &pointer, &numel), pshardSuccess);
  float* w = static_cast<float*>(pointer);
  for (int i = 0; i < 4; ++i) w[i] = 0;
  const char* json = nullptr;
  ASSERT_EQ(pshardGetHyperParameters(session_, -1, &json), pshardSuccess)
      << LastError();
  EXPECT_STREQ(json, R"({"lr":1,"momentum":0.5,"weight_decay":0})");
  StepWithGradientOne();  // b = 1
  EXPECT_EQ(w[0], -1.0f);

  ASSERT_EQ(pshardSetHyperParameters(session_, -1, R"({"momentum": 0.25})"),
            pshardSuccess)
      << LastError();
  StepWithGradientOne();  // b = 0.25 + 1
  EXPECT_EQ(w[0], -2.25f);
  // An lr change keeps the momentum set before it.
  ASSERT_EQ(pshardSetLearningRate(session_, -1, 2), pshardSuccess);
  ASSERT_EQ(pshardGetHyperParameters(session_, -1, &json), pshardSuccess);
  EXPECT_STREQ(json, R"({"lr":2,"momentum":0.25,"weight_decay":0})");
  StepWithGradientOne();  // b = 0.3125 + 1, times lr 2
  EXPECT_EQ(w[0], -4.875f);

  struct Refused {
    const char* json;
    const char* error;
  };
  for (const Refused& bad : std::vector<Refused>{
           {"{", "JSON syntax error"},
           {R"({"momentun": 0.9})",
            "momentun: unknown field; did you mean "
            "momentum?"},
           {R"({"momentum": 1})",
            "optimizer.hyper_parameters.momentum: must "
            "be in [0, 1), got 1"},
           {R"({"nesterov": true})",
            "optimizer.hyper_parameters.nesterov: is "
            "fixed by the job spec"},
           {R"({"betas": [0.9, 0.99]})",
            "betas: only applies to ADAM, ADAMW "
            "and LION, not SGD"},
       }) {
    EXPECT_EQ(pshardSetHyperParameters(session_, -1, bad.json),
              pshardInvalidArgument)
        << bad.json;
    EXPECT_THAT(LastError(), HasSubstr(bad.error));
  }
  EXPECT_EQ(pshardSetHyperParameters(session_, 0, R"({"lr": 1})"),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("parameter group 0 does not exist"));
  EXPECT_EQ(pshardSetHyperParameters(session_, -1, nullptr),
            pshardInvalidArgument);
  EXPECT_EQ(pshardGetHyperParameters(session_, -1, nullptr),
            pshardInvalidArgument);
  EXPECT_EQ(pshardGetHyperParameters(session_, 3, &json),
            pshardInvalidArgument);

  // Mid-step: refused; the step runs with what it began with.
  ASSERT_EQ(pshardGetGradient(session_, 0, &pointer, &numel), pshardSuccess);
  for (int i = 0; i < numel; ++i) static_cast<float*>(pointer)[i] = 1;
  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  EXPECT_EQ(pshardSetHyperParameters(session_, -1, R"({"momentum": 0.75})"),
            pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("between steps only"));
  ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  EXPECT_EQ(w[0], -7.53125f);  // b = 0.328125 + 1, times lr 2
}

// Slices of the optimizer state (API 3): GetEntrySlice reports a whole
// parameter as offset 0 of its numel; ImportOptimizerStateSlices checks its
// arguments, refuses overlapping or outside slices, and two slices that
// tile the parameter resume exactly as the whole state would (SGD momentum
// {1, 2, 3, 4} at step 7, gradient 1: buf = 0.9 * buf + 1).
TEST_F(PshardCTest, OptimizerStateSlicesExportAndImport) {
  const char kSgd[] =
      "{\"kind\": \"SGD\", \"hyper_parameters\": {\"lr\": 0.5, "
      "\"momentum\": 0.9}}";
  PrepareOneParameter(kSgd);

  const float head[2] = {1, 2};
  const float tail[2] = {3, 4};
  const char* names[] = {"w", "w"};
  const char* keys[] = {"momentum_buffer", "momentum_buffer"};
  const int64_t steps[] = {7, 7};
  const float* data[] = {head, tail};
  const int64_t numels[] = {2, 2};
  const int64_t offsets[] = {0, 2};
  EXPECT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 2, names, keys,
                                             steps, nullptr, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("offsets is NULL"));
  const int64_t negative[] = {0, -2};
  EXPECT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 2, names, keys,
                                             steps, negative, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("offset -2 is out of range"));
  const int64_t outside[] = {0, 3};
  EXPECT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 2, names, keys,
                                             steps, outside, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("[3, 5) is outside its 4 elements"));
  const int64_t overlapping[] = {0, 1};
  EXPECT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 2, names, keys,
                                             steps, overlapping, data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("[1, 3) overlaps [0, 2)"));
  const int64_t other_steps[] = {7, 8};
  EXPECT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 2, names, keys,
                                             other_steps, offsets, data,
                                             numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("steps 7 and 8"));
  // The whole-parameter call refuses a slice, naming the other call.
  EXPECT_EQ(pshardImportOptimizerState(session_, kSgd, 1, names, keys, steps,
                                       data, numels),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("pshardImportOptimizerStateSlices"));

  // The slices, and a "step" entry at offset 0 beside them (a step takes no
  // elements, so it repeats and overlaps nothing).
  const char* with_step_names[] = {"w", "w", "w"};
  const char* with_step_keys[] = {"momentum_buffer", "momentum_buffer",
                                  "step"};
  const int64_t with_step_steps[] = {7, 7, 7};
  const float* with_step_data[] = {head, tail, nullptr};
  const int64_t with_step_numels[] = {2, 2, 0};
  const int64_t with_step_offsets[] = {0, 2, 0};
  ASSERT_EQ(pshardImportOptimizerStateSlices(
                session_, kSgd, 3, with_step_names, with_step_keys,
                with_step_steps, with_step_offsets, with_step_data,
                with_step_numels),
            pshardSuccess)
      << LastError();
  int64_t numel = 0;
  StepWithGradientOne();

  pshardOptimizerState_t state = nullptr;
  ASSERT_EQ(pshardExportOptimizerState(session_, &state), pshardSuccess);
  const char* parameter = nullptr;
  const char* key = nullptr;
  int64_t step = 0, offset = -1, whole = -1;
  const float* buffer = nullptr;
  EXPECT_EQ(pshardOptimizerStateGetEntrySlice(state, 0, &parameter, &key,
                                              &step, &buffer, &numel, nullptr,
                                              &whole),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("offset is NULL"));
  EXPECT_EQ(pshardOptimizerStateGetEntrySlice(state, 0, &parameter, &key,
                                              &step, &buffer, &numel, &offset,
                                              nullptr),
            pshardInvalidArgument);
  EXPECT_EQ(pshardOptimizerStateGetEntrySlice(state, 1, &parameter, &key,
                                              &step, &buffer, &numel, &offset,
                                              &whole),
            pshardInvalidArgument);
  ASSERT_EQ(pshardOptimizerStateGetEntrySlice(state, 0, &parameter, &key,
                                              &step, &buffer, &numel, &offset,
                                              &whole),
            pshardSuccess)
      << LastError();
  EXPECT_STREQ(parameter, "w");
  EXPECT_EQ(step, 8);
  EXPECT_EQ(offset, 0);
  EXPECT_EQ(numel, 4);
  EXPECT_EQ(whole, 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(buffer[i], 0.9f * (i + 1) + 1);
  EXPECT_EQ(pshardOptimizerStateFree(state), pshardSuccess);
}

// Slices that leave owned elements uncovered fail the first step, naming
// the elements.
TEST_F(PshardCTest, OptimizerStateSlicesMustCoverTheOwnedElements) {
  const char kSgd[] =
      "{\"kind\": \"SGD\", \"hyper_parameters\": {\"lr\": 0.5, "
      "\"momentum\": 0.9}}";
  PrepareOneParameter(kSgd);
  const float tail[2] = {3, 4};
  const char* names[] = {"w"};
  const char* keys[] = {"momentum_buffer"};
  const int64_t steps[] = {7};
  const float* data[] = {tail};
  const int64_t numels[] = {2};
  const int64_t offsets[] = {2};
  ASSERT_EQ(pshardImportOptimizerStateSlices(session_, kSgd, 1, names, keys,
                                             steps, offsets, data, numels),
            pshardSuccess)
      << LastError();
  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  EXPECT_NE(pshardFinishStep(session_), pshardSuccess);
  EXPECT_THAT(LastError(),
              HasSubstr("has no entry for parameter 'w' elements [0, 4) (2 of "
                        "them covered)"));
  // The failed step aborted the communicator: closing reports it.
  EXPECT_NE(pshardSessionClose(session_), pshardSuccess);
  session_ = nullptr;
}

// A checkpoint's program states come back by rank after a load (written
// here by the checkpoint library, as a job's ranks would: rank 0 with a
// state, rank 1 without).
TEST_F(PshardCTest, ALoadedCheckpointGivesBackEachRanksProgramState) {
  ASSERT_NO_FATAL_FAILURE(PrepareOneParameter(R"({"kind": "SGD", )"
                                              R"("hyper_parameters": {"lr": 1}})"));
  const std::string root = std::string(getenv("TEST_TMPDIR")) + "/states";
  const std::vector<float> w = {1, 2, 3, 4};
  ASSERT_OK_AND_ASSIGN(auto w0, pshard::checkpoint::CheckpointWriter::Create(
                                    root, 0, 2, "fp"));
  ASSERT_OK_AND_ASSIGN(auto w1, pshard::checkpoint::CheckpointWriter::Create(
                                    root, 1, 2, "fp"));
  const std::string state("epoch 3\0rng", 11);
  ASSERT_OK_AND_ASSIGN(
      auto f0, w0.WriteShard(7, {{"w", pshard::checkpoint::FloatTensor(w), {}}},
                             state));
  ASSERT_OK_AND_ASSIGN(auto f1, w1.WriteShard(7, {}));
  ASSERT_OK(pshard::checkpoint::WriteManifest(root, {7, "fp", 2, {f0, f1}}));

  int64_t step = 0;
  ASSERT_EQ(pshardLoadCheckpoint(session_, root.c_str(), &step), pshardSuccess)
      << LastError();
  EXPECT_EQ(step, 7);
  const void* bytes = nullptr;
  int64_t size = 0;
  int found = 0;
  ASSERT_EQ(pshardGetLoadedProgramState(session_, 0, &bytes, &size, &found),
            pshardSuccess);
  ASSERT_EQ(found, 1);
  EXPECT_EQ(std::string(static_cast<const char*>(bytes), size), state);
  for (int rank : {1, 2}) {  // saved none; not in the checkpoint
    ASSERT_EQ(
        pshardGetLoadedProgramState(session_, rank, &bytes, &size, &found),
        pshardSuccess);
    EXPECT_EQ(found, 0) << rank;
  }
}

TEST_F(PshardCTest, CheckpointCallsCheckTheirOrderAndNeedACoordinatorToSave) {
  int64_t step = -1;
  EXPECT_EQ(pshardLoadCheckpoint(session_, nullptr, nullptr),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("step is NULL"));
  EXPECT_EQ(pshardLoadCheckpoint(session_, nullptr, &step), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("not prepared"));

  ASSERT_NO_FATAL_FAILURE(PrepareOneParameter(R"({"kind": "ADAM"})"));
  // Nothing to resume from (no PSHARD_RESUME_FROM): step 0, not an error.
  ASSERT_EQ(pshardLoadCheckpoint(session_, nullptr, &step), pshardSuccess)
      << LastError();
  EXPECT_EQ(step, 0);
  const std::string absent = std::string(getenv("TEST_TMPDIR")) + "/no-ckpt";
  EXPECT_EQ(pshardLoadCheckpoint(session_, absent.c_str(), &step),
            pshardNotFound);
  EXPECT_THAT(LastError(), HasSubstr(absent));
  EXPECT_EQ(pshardSaveCheckpoint(session_, 1), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("local test mode"));
  const char state[] = "sched";
  EXPECT_EQ(pshardSaveCheckpointWithState(session_, 1, state, 5),
            pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("local test mode"));
  EXPECT_EQ(pshardSaveCheckpointWithState(session_, 1, nullptr, 5),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("state is NULL"));
  EXPECT_EQ(pshardSaveCheckpointWithState(session_, 1, state, -1),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("size must be >= 0, got -1"));
  EXPECT_EQ(pshardSaveCheckpointWithState(session_, 1, state,
                                          (int64_t{16} << 20) + 1),
            pshardInvalidArgument);
  EXPECT_THAT(LastError(), HasSubstr("at most 16777216 bytes"));
  const void* loaded = state;
  int64_t size = -1;
  int found = -1;
  ASSERT_EQ(pshardGetLoadedProgramState(session_, 0, &loaded, &size, &found),
            pshardSuccess);
  EXPECT_EQ(found, 0);  // nothing loaded
  EXPECT_EQ(loaded, nullptr);
  EXPECT_EQ(size, 0);
  EXPECT_EQ(pshardGetLoadedProgramState(session_, -1, &loaded, &size, &found),
            pshardInvalidArgument);
  EXPECT_EQ(pshardGetLoadedProgramState(session_, 0, &loaded, &size, nullptr),
            pshardInvalidArgument);

  ASSERT_EQ(pshardGradientReady(session_, 0), pshardSuccess);
  ASSERT_EQ(pshardFinishStep(session_), pshardSuccess) << LastError();
  EXPECT_EQ(pshardLoadCheckpoint(session_, nullptr, &step), pshardInvalidUsage);
  EXPECT_THAT(LastError(), HasSubstr("before the first step"));
  EXPECT_STREQ(pshardGetErrorString(pshardNotFound), "not found");
  EXPECT_STREQ(pshardGetErrorString(pshardDataLoss),
               "data loss (a corrupted checkpoint)");
}

TEST(PshardCOpenTest, AMissingEnvironmentNamesWhatIsMissing) {
  unsetenv("PSHARD_COORDINATOR");
  unsetenv("PSHARD_LOCAL_STORE");
  pshardSession_t session = reinterpret_cast<pshardSession_t>(0x1);
  EXPECT_EQ(pshardSessionOpen(&session), pshardInvalidArgument);
  EXPECT_EQ(session, nullptr);
  EXPECT_THAT(LastError(), HasSubstr("PSHARD_COORDINATOR is not set"));
  EXPECT_STREQ(pshardGetErrorString(pshardInvalidUsage),
               "invalid usage (call out of order)");
  EXPECT_EQ(pshardGetVersion(), PSHARD_API_VERSION);
}

}  // namespace
