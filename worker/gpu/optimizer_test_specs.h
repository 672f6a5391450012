// Test helper: the optimizer specs that optimizer_plan_test and
// gpu_shard_optimizer_test both step, so the host plan and the GPU optimizer
// are checked on the same parameter groups.
#ifndef PSHARD_WORKER_GPU_OPTIMIZER_TEST_SPECS_H_
#define PSHARD_WORKER_GPU_OPTIMIZER_TEST_SPECS_H_

#include <string>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker::testing {

// Parses `json` (proto3 JSON); a parse error fails the current test.
inline v1::OptimizerSpec Spec(const std::string& json) {
  v1::OptimizerSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return spec;
}

// Nesterov SGD with weight decay; "*.bias" in a momentum-free group.
inline constexpr char kSgdJson[] =
    R"({"kind": "SGD", "hyperParameters": {"lr": 0.1, "momentum": 0.9,
        "weightDecay": 0.01, "nesterov": true},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"momentum": 0, "lr": 0.05,
                                             "nesterov": false}}]})";
// SGD with momentum and dampening, one group.
inline constexpr char kSgdDampeningJson[] =
    R"({"kind": "SGD", "hyperParameters": {"lr": 0.03, "momentum": 0.5,
        "dampening": 0.25}})";
// Adam with weight decay; "*.bias" with its own lr and betas, no decay.
inline constexpr char kAdamJson[] =
    R"({"kind": "ADAM", "hyperParameters": {"lr": 0.001, "weightDecay": 0.1},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"lr": 0.01, "betas": [0.8, 0.99],
                                             "weightDecay": 0}}]})";
// AdamW; "*.bias" without weight decay.
inline constexpr char kAdamWJson[] =
    R"({"kind": "ADAMW", "hyperParameters": {"lr": 0.002, "eps": 1e-6},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"weightDecay": 0}}]})";

// Learning-rate schedules: Adam with a warmed-up cosine and "*.bias" on its
// own STEP schedule; SGD with momentum on a LINEAR one.
inline constexpr char kAdamScheduleJson[] =
    R"({"kind": "ADAM", "hyperParameters": {"lr": 0.01, "lrSchedule": {
            "kind": "COSINE", "tMax": 3, "etaMin": 0.001, "warmupSteps": 2}},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"lrSchedule": {
                             "kind": "STEP", "stepSize": 2, "gamma": 0.5}}}]})";
inline constexpr char kSgdScheduleJson[] =
    R"({"kind": "SGD", "hyperParameters": {"lr": 0.1, "momentum": 0.9,
        "lrSchedule": {"kind": "LINEAR", "startFactor": 1.0, "endFactor": 0.1,
                       "totalIters": 4}}})";

// Issue 15 item 5's kinds, each with its options in two groups: Adam with
// AMSGrad ("*.bias" without); Adagrad with lr_decay, L2 and a non-zero
// starting "sum" ("*.bias" with its own); RMSprop centered with momentum and
// L2 ("*.bias" plain); Lion with decoupled decay ("*.bias" without) on a
// schedule.
inline constexpr char kAdamAmsgradJson[] =
    R"({"kind": "ADAMW", "hyperParameters": {"lr": 0.01, "amsgrad": true},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"amsgrad": false}}]})";
inline constexpr char kAdagradJson[] =
    R"({"kind": "ADAGRAD", "hyperParameters": {"lr": 0.05, "lrDecay": 0.1,
        "weightDecay": 0.01, "initialAccumulatorValue": 0.1},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"initialAccumulatorValue": 0.5,
                                             "eps": 1e-6}}]})";
inline constexpr char kRmspropJson[] =
    R"({"kind": "RMSPROP", "hyperParameters": {"lr": 0.01, "centered": true,
        "momentum": 0.9, "weightDecay": 0.01, "alpha": 0.95},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"centered": false,
                                             "momentum": 0}}]})";
inline constexpr char kLionJson[] =
    R"({"kind": "LION", "hyperParameters": {"lr": 0.001, "weightDecay": 0.5,
        "lrSchedule": {"kind": "COSINE", "tMax": 4}},
        "paramGroups": [{"params": ["*.bias"],
                         "hyperParameters": {"weightDecay": 0,
                                             "betas": [0.8, 0.9]}}]})";

}  // namespace pshard::worker::testing

#endif  // PSHARD_WORKER_GPU_OPTIMIZER_TEST_SPECS_H_
