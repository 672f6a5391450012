#include "common/job_spec.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/job_spec_json.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;
using v1::JobSpec;
using v1::OptimizerSpec;

constexpr char kGoodSpec[] = R"json({
  "name": "mlp-demo",
  "world_size": 2,
  "backend": "gloo",
  "mlp": {"input_dim": 32, "hidden_dims": [64, 64], "output_dim": 8, "batch_size": 16},
  "bucket_cap_mb": 1,
  "assignment_policy": "balanced",
  "comm_mode": "REDUCE_BROADCAST",
  "optimizer": {
    "kind": "adam",
    "hyper_parameters": {"lr": 0.001, "betas": [0.9, 0.99]},
    "param_groups": [
      {"params": ["*.bias"], "hyper_parameters": {"weight_decay": 0}},
      {"params": ["layers.0.*"], "hyper_parameters": {"lr": 0.01, "eps": 1e-6}}
    ]
  },
  "steps": 100,
  "seed": 7,
  "output_dir": "/tmp/out"
})json";

JobSpec ParseGood() {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(kGoodSpec);
  EXPECT_OK(spec);
  return spec.ok() ? *spec : JobSpec();
}

TEST(ParseJobSpecJsonTest, ParsesEveryFieldOfAGoodSpec) {
  ASSERT_OK_AND_ASSIGN(JobSpec spec, ParseJobSpecJson(kGoodSpec));
  EXPECT_EQ(spec.name(), "mlp-demo");
  EXPECT_EQ(spec.world_size(), 2);
  EXPECT_EQ(spec.backend(), JobSpec::GLOO);
  ASSERT_TRUE(spec.has_mlp());
  EXPECT_EQ(spec.mlp().hidden_dims_size(), 2);
  EXPECT_EQ(spec.assignment_policy(), JobSpec::BALANCED);
  EXPECT_EQ(spec.comm_mode(), JobSpec::REDUCE_BROADCAST);
  EXPECT_EQ(spec.optimizer().kind(), OptimizerSpec::ADAM);
  EXPECT_EQ(spec.optimizer().param_groups_size(), 2);
  EXPECT_EQ(spec.steps(), 100);
  EXPECT_EQ(spec.seed(), 7u);
}

TEST(ParseJobSpecJsonTest, AcceptsCamelCaseFieldNames) {
  EXPECT_OK(ParseJobSpecJson(absl::StrReplaceAll(
      kGoodSpec, {{"\"world_size\"", "\"worldSize\""},
                  {"\"bucket_cap_mb\"", "\"bucketCapMb\""}})));
}

struct BadCase {
  std::string name;
  std::string json;
  std::string expected;  // substring of the error message
};

class BadSpecTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSpecTest, IsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ParseJobSpecJson(GetParam().json),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(GetParam().expected)));
}

std::string Replace(absl::string_view from, absl::string_view to) {
  std::string json = absl::StrReplaceAll(kGoodSpec, {{from, to}});
  EXPECT_NE(json, kGoodSpec) << "test replacement did not apply: " << from;
  return json;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadSpecTest,
    ::testing::Values(
        BadCase{"NotJson", "{name: ", "JSON syntax error at line 1, column 8"},
        BadCase{"UnknownField", Replace("\"seed\": 7", "\"sede\": 7"), "sede"},
        BadCase{"WrongType", Replace("\"world_size\": 2", "\"world_size\": \"two\""),
                "world_size"},
        BadCase{"UnknownEnum", Replace("\"gloo\"", "\"mpi\""), "mpi"},
        BadCase{"EmptyName", Replace("\"mlp-demo\"", "\"\""), "name: required"},
        BadCase{"LongName", Replace("\"mlp-demo\"", "\"" + std::string(200, 'x') + "\""),
                "name: at most 128"},
        BadCase{"WorldSizeZero", Replace("\"world_size\": 2", "\"world_size\": 0"),
                "world_size: required: an integer in [1, 4096]"},
        BadCase{"WorldSizeHuge", Replace("\"world_size\": 2", "\"world_size\": 5000"),
                "world_size: must be in [1, 4096], got 5000"},
        BadCase{"BucketCapNegative", Replace("\"bucket_cap_mb\": 1", "\"bucket_cap_mb\": -1"),
                "bucket_cap_mb"},
        BadCase{"BucketCapHuge", Replace("\"bucket_cap_mb\": 1", "\"bucket_cap_mb\": 1e9"),
                "bucket_cap_mb"},
        BadCase{"BucketCapNaN", Replace("\"bucket_cap_mb\": 1", "\"bucket_cap_mb\": \"NaN\""),
                "bucket_cap_mb"},
        BadCase{"LrNegative", Replace("\"lr\": 0.001", "\"lr\": -1"),
                "optimizer.hyper_parameters.lr: must be in (0"},
        BadCase{"LrNaN", Replace("\"lr\": 0.001", "\"lr\": \"NaN\""),
                "optimizer.hyper_parameters.lr"},
        BadCase{"LrInfinite", Replace("\"lr\": 0.001", "\"lr\": \"Infinity\""),
                "optimizer.hyper_parameters.lr"},
        BadCase{"BetaOne", Replace("[0.9, 0.99]", "[0.9, 1.0]"),
                "optimizer.hyper_parameters.betas[1]"},
        BadCase{"OneBeta", Replace("[0.9, 0.99]", "[0.9]"),
                "optimizer.hyper_parameters.betas: must have exactly 2"},
        BadCase{"EpsZero", Replace("\"eps\": 1e-6", "\"eps\": 0"),
                "optimizer.param_groups[1].hyper_parameters.eps"},
        BadCase{"MomentumOnAdam", Replace("\"weight_decay\": 0", "\"momentum\": 0.9"),
                "optimizer.param_groups[0].hyper_parameters.momentum: only applies to SGD"},
        BadCase{"EmptyGroup", Replace("[\"*.bias\"]", "[]"),
                "optimizer.param_groups[0].params: needs at least one"},
        BadCase{"NoOptimizerKind", Replace("\"kind\": \"adam\",", ""), "optimizer.kind"},
        BadCase{"NoWorkload",
                Replace("\"mlp\": {\"input_dim\": 32, \"hidden_dims\": [64, 64], "
                        "\"output_dim\": 8, \"batch_size\": 16},",
                        ""),
                "workload: required"},
        BadCase{"MlpZeroWidth", Replace("[64, 64]", "[64, 0]"), "mlp.hidden_dims[1]"},
        BadCase{"StepsZero", Replace("\"steps\": 100", "\"steps\": 0"), "steps"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ValidateJobSpecTest, SgdNeedsLearningRateAndSaneNesterov) {
  JobSpec spec = ParseGood();
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->clear_param_groups();
  spec.mutable_optimizer()->clear_hyper_parameters();
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.hyper_parameters.lr: required for SGD")));
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  EXPECT_OK(ValidateJobSpec(spec));
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_nesterov(true);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nesterov: requires momentum > 0 and dampening 0")));
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_momentum(0.9);
  EXPECT_OK(ValidateJobSpec(spec));
  spec.mutable_optimizer()->mutable_hyper_parameters()->add_betas(0.9);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("betas: only applies to ADAM, ADAMW and LION, not SGD")));
}

TEST(ValidateJobSpecTest, UnknownEnumNumbersAreRejected) {
  JobSpec spec = ParseGood();
  spec.set_comm_mode(static_cast<JobSpec::CommMode>(42));
  EXPECT_THAT(ValidateJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("comm_mode: unknown value 42")));
}

TEST(ValidateJobSpecTest, ReplayAndSyntheticNeedTheirFields) {
  JobSpec spec = ParseGood();
  spec.mutable_replay()->set_params_path("/data/params.safetensors");
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("replay.gradients_dir: required")));
  spec.mutable_synthetic()->set_num_parameters(0);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("synthetic.num_parameters")));
  spec.mutable_synthetic()->set_num_parameters(1000);
  EXPECT_OK(ValidateJobSpec(spec));
}

TEST(ApplyJobSpecDefaultsTest, FillsDocumentedDefaultsOnly) {
  JobSpec spec = ParseGood();
  spec.clear_backend();
  spec.clear_assignment_policy();
  spec.clear_comm_mode();
  spec.clear_bucket_cap_mb();
  const JobSpec with_defaults = ApplyJobSpecDefaults(spec);
  EXPECT_EQ(with_defaults.backend(), JobSpec::AUTO);
  EXPECT_EQ(with_defaults.assignment_policy(), JobSpec::BALANCED);
  EXPECT_EQ(with_defaults.comm_mode(), JobSpec::REDUCE_BROADCAST);
  EXPECT_EQ(with_defaults.bucket_cap_mb(), 25);
  EXPECT_EQ(with_defaults.progress_every(), 1);
  EXPECT_EQ(with_defaults.collective_timeout_seconds(), 60);
  EXPECT_EQ(with_defaults.steps(), spec.steps());
  EXPECT_OK(ValidateJobSpec(with_defaults));
}

TEST(ResolveHyperParametersTest, FirstMatchingGroupThenOptimizerThenPyTorchDefaults) {
  const JobSpec spec = ParseGood();
  const OptimizerSpec& opt = spec.optimizer();
  EXPECT_EQ(ParamGroupIndex(opt, "layers.0.bias"), 0);  // first match wins
  EXPECT_EQ(ParamGroupIndex(opt, "layers.0.weight"), 1);
  EXPECT_EQ(ParamGroupIndex(opt, "layers.2.weight"), -1);

  const HyperParameters first_layer = ResolveHyperParameters(opt, "layers.0.weight");
  EXPECT_DOUBLE_EQ(first_layer.lr, 0.01);
  EXPECT_DOUBLE_EQ(first_layer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(first_layer.beta2, 0.99);  // from the optimizer's own

  const HyperParameters other = ResolveHyperParameters(opt, "layers.2.weight");
  EXPECT_DOUBLE_EQ(other.lr, 0.001);
  EXPECT_DOUBLE_EQ(other.beta1, 0.9);
  EXPECT_DOUBLE_EQ(other.eps, 1e-8);  // PyTorch's default
  EXPECT_DOUBLE_EQ(other.weight_decay, 0);

  OptimizerSpec adamw;
  adamw.set_kind(OptimizerSpec::ADAMW);
  const HyperParameters adamw_defaults = ResolveHyperParameters(adamw, "w");
  EXPECT_DOUBLE_EQ(adamw_defaults.lr, 1e-3);
  EXPECT_DOUBLE_EQ(adamw_defaults.weight_decay, 1e-2);
}

TEST(ParseOptimizerSpecJsonTest, ParsesGroupsAndNamesBadFieldsAsInAJobSpec) {
  ASSERT_OK_AND_ASSIGN(
      OptimizerSpec opt,
      ParseOptimizerSpecJson(R"json({"kind": "sgd",
          "hyper_parameters": {"lr": 0.1, "momentum": 0.9},
          "param_groups": [{"params": ["*.bias"],
                            "hyper_parameters": {"weight_decay": 0}}]})json"));
  EXPECT_EQ(opt.kind(), OptimizerSpec::SGD);
  EXPECT_EQ(opt.param_groups_size(), 1);

  EXPECT_THAT(ParseOptimizerSpecJson(
                  R"json({"kind": "adam", "hyper_parameters": {"lr": -1}})json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.hyper_parameters.lr")));
  EXPECT_THAT(ParseOptimizerSpecJson(R"json({"kind": "adam", "lr": 1})json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "optimizer.lr: unknown field (its fields: kind, "
                       "hyper_parameters, param_groups, max_grad_norm, "
                       "norm_type)"));
  EXPECT_THAT(ParseOptimizerSpecJson("{}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.kind")));
}

}  // namespace
}  // namespace pshard

namespace pshard {
namespace {

constexpr char kProgramSpec[] = R"json({
  "name": "train",
  "world_size": 2,
  "program": {
    "argv": ["python3", "train.py", "--lr", "3e-4"],
    "env": {"K": "V", "_X1": ""},
    "working_dir": "/work",
    "grace_period_seconds": 5
  }
})json";

v1::JobSpec ProgramSpec() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(kProgramSpec);
  EXPECT_OK(spec);
  return spec.ok() ? *spec : v1::JobSpec();
}

TEST(ProgramSpecTest, ParsesWithoutOptimizerOrSteps) {
  const v1::JobSpec spec = ProgramSpec();
  ASSERT_TRUE(spec.has_program());
  EXPECT_EQ(spec.program().argv_size(), 4);
  EXPECT_EQ(spec.program().env().at("K"), "V");
  EXPECT_EQ(spec.program().working_dir(), "/work");
  EXPECT_EQ(spec.program().grace_period_seconds(), 5);
  EXPECT_FALSE(spec.has_optimizer());
  EXPECT_EQ(spec.steps(), 0);
}

TEST(ProgramSpecTest, DefaultGracePeriod) {
  v1::JobSpec spec = ProgramSpec();
  spec.mutable_program()->clear_grace_period_seconds();
  ASSERT_OK(ValidateJobSpec(spec));
  EXPECT_EQ(ApplyJobSpecDefaults(spec).program().grace_period_seconds(),
            kDefaultProgramGracePeriodSeconds);
}

TEST(ProgramSpecTest, OptimizerAndStepsAreCheckedWhenSet) {
  v1::JobSpec spec = ProgramSpec();
  spec.set_steps(-1);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps")));
  spec.set_steps(10);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.hyper_parameters.lr")));
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  EXPECT_OK(ValidateJobSpec(spec));
}

TEST(ProgramSpecTest, OverlapIsAcceptedForAProgramOnEitherBackend) {
  v1::JobSpec spec = ProgramSpec();
  spec.set_overlap_param_broadcast(true);
  EXPECT_OK(ValidateJobSpec(spec));
  spec.set_backend(v1::JobSpec::NCCL);
  EXPECT_OK(ValidateJobSpec(spec));
}

// One broken field per case; the error names it.
struct ProgramCase {
  std::string name;
  std::function<void(v1::ProgramWorkload&)> mutate;
  std::string expected;
};

class BadProgramTest : public ::testing::TestWithParam<ProgramCase> {};

TEST_P(BadProgramTest, IsInvalidArgumentNamingTheField) {
  v1::JobSpec spec = ProgramSpec();
  GetParam().mutate(*spec.mutable_program());
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(GetParam().expected)));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadProgramTest,
    ::testing::ValuesIn(std::vector<ProgramCase>{
        {"EmptyArgv", [](auto& p) { p.clear_argv(); },
         "program.argv: required"},
        {"EmptyArgv0", [](auto& p) { p.set_argv(0, ""); }, "program.argv[0]"},
        {"NulInArg",
         [](auto& p) { p.set_argv(2, std::string("a\0b", 3)); },
         "program.argv[2]: contains a NUL byte"},
        {"TooManyArgs",
         [](auto& p) {
           for (int i = 0; i < kMaxProgramArgs; ++i) p.add_argv("x");
         },
         "program.argv: at most 4096 arguments"},
        {"ArgvTooBig",
         [](auto& p) { p.add_argv(std::string(kMaxProgramArgvBytes, 'a')); },
         "program.argv: at most 262144 bytes"},
        {"EnvNameStartsWithDigit",
         [](auto& p) { (*p.mutable_env())["1X"] = "v"; },
         "program.env[\"1X\"]: not a valid variable name"},
        {"EnvNameWithEquals",
         [](auto& p) { (*p.mutable_env())["A=B"] = "v"; },
         "program.env[\"A=B\"]: not a valid"},
        {"EnvNameEmpty", [](auto& p) { (*p.mutable_env())[""] = "v"; },
         "program.env[\"\"]: not a valid"},
        {"EnvOverridesPshard",
         [](auto& p) { (*p.mutable_env())["PSHARD_RANK"] = "3"; },
         "program.env[\"PSHARD_RANK\"]: set by the worker's agent"},
        {"EnvOverridesTorchrun",
         [](auto& p) { (*p.mutable_env())["MASTER_PORT"] = "1"; },
         "program.env[\"MASTER_PORT\"]: set by the worker's agent"},
        {"EnvValueWithNul",
         [](auto& p) { (*p.mutable_env())["V"] = std::string("a\0b", 3); },
         "program.env[\"V\"]: contains a NUL byte"},
        {"TooManyEnvVars",
         [](auto& p) {
           for (int i = 0; i < kMaxProgramEnvVars; ++i) {
             (*p.mutable_env())[absl::StrCat("V", i)] = "";
           }
         },
         "program.env: at most 1024 variables"},
        {"EnvTooBig",
         [](auto& p) {
           (*p.mutable_env())["BIG"] = std::string(kMaxProgramEnvBytes, 'v');
         },
         "program.env: at most 262144 bytes"},
        {"RelativeWorkingDir", [](auto& p) { p.set_working_dir("work"); },
         "program.working_dir: must be an absolute path"},
        {"NegativeGrace", [](auto& p) { p.set_grace_period_seconds(-1); },
         "program.grace_period_seconds"},
        {"HugeGrace", [](auto& p) { p.set_grace_period_seconds(1e9); },
         "program.grace_period_seconds"},
    }),
    [](const ::testing::TestParamInfo<ProgramCase>& info) {
      return info.param.name;
    });

// ---- Checkpoints and restarts (issue 14) ----

TEST(FaultToleranceSpecTest, ParsesCheckpointRestartsAndMinWorldSize) {
  ASSERT_OK_AND_ASSIGN(
      JobSpec spec,
      ParseJobSpecJson(Replace(
          "\"seed\": 7",
          "\"seed\": 7, \"checkpoint\": {\"dir\": \"/ckpt\", \"everySteps\": 25, "
          "\"keepLast\": 2}, \"maxRestarts\": 3, \"minWorldSize\": 1, "
          "\"fromCheckpoint\": \"/old/step-50\"")));
  EXPECT_EQ(spec.checkpoint().dir(), "/ckpt");
  EXPECT_EQ(spec.checkpoint().every_steps(), 25);
  EXPECT_EQ(spec.checkpoint().keep_last(), 2);
  EXPECT_EQ(spec.max_restarts(), 3);
  EXPECT_EQ(spec.min_world_size(), 1);
  EXPECT_EQ(spec.from_checkpoint(), "/old/step-50");
}

TEST(FaultToleranceSpecTest, MinWorldSizeDefaultsToWorldSize) {
  EXPECT_EQ(ApplyJobSpecDefaults(ParseGood()).min_world_size(), 2);
  EXPECT_EQ(ApplyJobSpecDefaults(ParseGood()).max_restarts(), 0);
}

TEST(FaultToleranceSpecTest, ProgramMayLeaveEveryStepsToTheProgram) {
  JobSpec spec = ProgramSpec();
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.set_restart_on_program_failure(true);
  EXPECT_OK(ValidateJobSpec(spec));
}

struct FaultToleranceCase {
  std::string name;
  std::function<void(JobSpec&)> mutate;
  std::string expected;
};

class BadFaultToleranceTest
    : public ::testing::TestWithParam<FaultToleranceCase> {};

TEST_P(BadFaultToleranceTest, IsInvalidArgumentNamingTheField) {
  JobSpec spec = ParseGood();
  GetParam().mutate(spec);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(GetParam().expected)));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadFaultToleranceTest,
    ::testing::ValuesIn(std::vector<FaultToleranceCase>{
        {"CheckpointWithoutDir",
         [](auto& s) { s.mutable_checkpoint()->set_every_steps(5); },
         "checkpoint.dir: required: an absolute path"},
        {"RelativeCheckpointDir",
         [](auto& s) {
           s.mutable_checkpoint()->set_dir("ckpt");
           s.mutable_checkpoint()->set_every_steps(5);
         },
         "checkpoint.dir: must be an absolute path, got \"ckpt\""},
        {"CheckpointDirWithNul",
         [](auto& s) {
           s.mutable_checkpoint()->set_dir(std::string("/a\0b", 4));
           s.mutable_checkpoint()->set_every_steps(5);
         },
         "checkpoint.dir: contains a NUL byte"},
        {"CheckpointDirTooLong",
         [](auto& s) {
           s.mutable_checkpoint()->set_dir("/" + std::string(kMaxPathLength, 'd'));
           s.mutable_checkpoint()->set_every_steps(5);
         },
         "checkpoint.dir: at most 4096 characters"},
        {"EveryStepsMissing",
         [](auto& s) { s.mutable_checkpoint()->set_dir("/ckpt"); },
         "checkpoint.every_steps: required: an integer in [1, 1000000000]"},
        {"KeepLastNegative",
         [](auto& s) {
           s.mutable_checkpoint()->set_dir("/ckpt");
           s.mutable_checkpoint()->set_every_steps(5);
           s.mutable_checkpoint()->set_keep_last(-1);
         },
         "checkpoint.keep_last: must be in [0, 1000000], got -1"},
        {"MaxRestartsNegative", [](auto& s) { s.set_max_restarts(-1); },
         "max_restarts: must be in [0, 1000], got -1"},
        {"MaxRestartsHuge", [](auto& s) { s.set_max_restarts(1001); },
         "max_restarts: must be in [0, 1000], got 1001"},
        {"PriorityTooHigh", [](auto& s) { s.set_priority(1001); },
         "priority: must be in [-1000, 1000], got 1001"},
        {"PriorityTooLow", [](auto& s) { s.set_priority(-1001); },
         "priority: must be in [-1000, 1000], got -1001"},
        {"MinWorldSizeAboveWorldSize", [](auto& s) { s.set_min_world_size(3); },
         "min_world_size: must be in [1, 2], got 3"},
        {"MinWorldSizeNegative", [](auto& s) { s.set_min_world_size(-1); },
         "min_world_size: must be in [1, 2], got -1"},
        {"RelativeFromCheckpoint",
         [](auto& s) { s.set_from_checkpoint("step-5"); },
         "from_checkpoint: must be an absolute path"},
        {"RestartOnProgramFailureWithoutProgram",
         [](auto& s) { s.set_restart_on_program_failure(true); },
         "restart_on_program_failure: only for a program workload"},
    }),
    [](const ::testing::TestParamInfo<FaultToleranceCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace pshard

namespace pshard {
namespace {

// An Adam optimizer with an lr_schedule on its default group and a COSINE
// one on param_groups[1]; `default_schedule` and `group_schedule` are JSON
// objects.
std::string ScheduleSpec(const std::string& default_schedule,
                         const std::string& group_schedule = "{\"kind\": \"cosine\", \"t_max\": 10}") {
  return absl::StrCat(R"json({
  "name": "sched", "world_size": 2,
  "synthetic": {"num_parameters": 100},
  "optimizer": {
    "kind": "adam",
    "hyper_parameters": {"lr": 0.01, "lr_schedule": )json",
                      default_schedule, R"json(},
    "param_groups": [
      {"params": ["*.bias"], "hyper_parameters": {"lr": 0.1}},
      {"params": ["t1"], "hyper_parameters": {"lr_schedule": )json",
                      group_schedule, R"json(}}
    ]
  },
  "steps": 10
})json");
}

TEST(LrScheduleSpecTest, ResolvesDefaultsAndGroupOverrides) {
  ASSERT_OK_AND_ASSIGN(
      const JobSpec spec,
      ParseJobSpecJson(ScheduleSpec(
          R"({"kind": "linear", "warmup_steps": 3, "end_factor": 0.5})")));
  const OptimizerSpec& opt = spec.optimizer();
  const HyperParameters base = ResolveHyperParameters(opt, "t0");
  EXPECT_EQ(base.lr_schedule.kind, LrSchedule::Kind::kLinear);
  EXPECT_EQ(base.lr_schedule.warmup_steps, 3);
  EXPECT_DOUBLE_EQ(base.lr_schedule.warmup_start_factor, 1.0 / 3);
  EXPECT_DOUBLE_EQ(base.lr_schedule.start_factor, 1.0 / 3);  // torch's
  EXPECT_DOUBLE_EQ(base.lr_schedule.end_factor, 0.5);
  EXPECT_EQ(base.lr_schedule.total_iters, 5);
  // A group without a schedule keeps the optimizer's; one with its own
  // replaces it whole (its warmup is not inherited).
  EXPECT_EQ(ResolveHyperParameters(opt, "x.bias").lr_schedule, base.lr_schedule);
  const HyperParameters t1 = ResolveHyperParameters(opt, "t1");
  EXPECT_EQ(t1.lr_schedule.kind, LrSchedule::Kind::kCosine);
  EXPECT_EQ(t1.lr_schedule.t_max, 10);
  EXPECT_EQ(t1.lr_schedule.warmup_steps, 0);
  EXPECT_FALSE(t1 == base);
  // No schedule anywhere: constant.
  EXPECT_EQ(ResolveHyperParameters(ParseGood().optimizer(), "w").lr_schedule,
            LrSchedule());
  // Progress's lr: the default group's, for 1-based steps.
  EXPECT_DOUBLE_EQ(DefaultGroupLearningRate(opt, 1), 0.01 / 3);
  EXPECT_DOUBLE_EQ(DefaultGroupLearningRate(opt, 4), 0.01 / 3);
  EXPECT_DOUBLE_EQ(DefaultGroupLearningRate(opt, 9), 0.005);
}

v1::OptimizerHyperParameters HyperParametersFromJson(absl::string_view json) {
  v1::OptimizerHyperParameters hp;
  EXPECT_OK(ParseStrictJson(json, "", &hp));
  return hp;
}

OptimizerSpec OptimizerFromJson(absl::string_view json) {
  absl::StatusOr<OptimizerSpec> spec = ParseOptimizerSpecJson(json);
  EXPECT_OK(spec.status());
  return spec.value_or(OptimizerSpec());
}

// Changes a program sets (pshardSetHyperParameters) replace their own
// group's values; a set lr replaces the group's schedule too.
TEST(LrScheduleSpecTest, SetRatesReplaceTheirGroupsScheduleOnly) {
  ASSERT_OK_AND_ASSIGN(
      const JobSpec spec,
      ParseJobSpecJson(ScheduleSpec(
          R"({"kind": "linear", "warmup_steps": 3, "end_factor": 0.5})")));
  const OptimizerSpec& opt = spec.optimizer();
  const HyperParameters base = ResolveHyperParameters(opt, "t0");
  const HyperParameters t1 = ResolveHyperParameters(opt, "t1");
  EXPECT_EQ(base.group, -1);
  EXPECT_EQ(t1.group, ParamGroupIndex(opt, "t1"));
  ASSERT_GE(t1.group, 0);

  HyperParameterOverrides set;
  EXPECT_DOUBLE_EQ(StepLearningRate(base, 9, set), 0.005);
  ASSERT_OK(set.Set(opt, -1, HyperParametersFromJson(R"({"lr": 0.5})")));
  EXPECT_DOUBLE_EQ(StepLearningRate(base, 9, set), 0.5);
  EXPECT_DOUBLE_EQ(StepLearningRate(base, 1, set), 0.5);
  EXPECT_DOUBLE_EQ(DefaultGroupLearningRate(opt, 9, set), 0.5);
  EXPECT_DOUBLE_EQ(StepLearningRate(t1, 1, set),
                   ScheduledLearningRate(t1.lr, t1.lr_schedule, 0));
  // Betas alone keep t1's schedule.
  ASSERT_OK(set.Set(opt, t1.group,
                    HyperParametersFromJson(R"({"betas": [0.8, 0.9]})")));
  EXPECT_DOUBLE_EQ(StepLearningRate(t1, 4, set),
                   ScheduledLearningRate(t1.lr, t1.lr_schedule, 3));
  ASSERT_OK(set.Set(opt, t1.group, HyperParametersFromJson(R"({"lr": 0.25})")));
  EXPECT_DOUBLE_EQ(StepLearningRate(t1, 1, set), 0.25);
  EXPECT_DOUBLE_EQ(EffectiveHyperParameters(t1, set).beta1, 0.8);
  EXPECT_EQ(set.Get(t1.group + 5), nullptr);
  EXPECT_EQ(set.Get(-2), nullptr);
}

// What torch's schedulers change while training (OneCycleLR's momentum or
// betas), merged per group over the spec's values, each checked as the
// job spec field it replaces.
TEST(HyperParameterOverridesTest, ChangesMergeIntoTheirGroupOnly) {
  const OptimizerSpec sgd = OptimizerFromJson(R"({
    "kind": "SGD",
    "hyper_parameters": {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "param_groups": [{"params": ["b*"], "hyper_parameters": {"momentum": 0}}]
  })");
  HyperParameterOverrides set;
  ASSERT_OK(set.Set(sgd, -1, HyperParametersFromJson(R"({"momentum": 0.85})")));
  ASSERT_OK(set.Set(sgd, -1, HyperParametersFromJson(R"({"lr": 0.05})")));
  const HyperParameters* changed = set.Get(-1);
  ASSERT_NE(changed, nullptr);
  EXPECT_EQ(changed->momentum, 0.85);  // kept by the later lr change
  EXPECT_EQ(changed->lr, 0.05);
  EXPECT_EQ(changed->weight_decay, 0.01);  // the spec's
  EXPECT_EQ(changed->lr_schedule, LrSchedule());
  EXPECT_EQ(set.Get(0), nullptr);
  // What a program reads back: its kind's settable fields.
  EXPECT_EQ(SettableHyperParameters(sgd, -1, set).DebugString(),
            HyperParametersFromJson(
                R"({"lr": 0.05, "weight_decay": 0.01, "momentum": 0.85})")
                .DebugString());
  EXPECT_EQ(SettableHyperParameters(sgd, 0, set).DebugString(),
            HyperParametersFromJson(
                R"({"lr": 0.1, "weight_decay": 0.01, "momentum": 0})")
                .DebugString());

  const OptimizerSpec adam = OptimizerFromJson(R"({"kind": "ADAMW"})");
  HyperParameterOverrides adam_set;
  // A second betas replaces the first (a list is not appended to).
  ASSERT_OK(adam_set.Set(adam, -1,
                         HyperParametersFromJson(R"({"betas": [0.9, 0.99]})")));
  ASSERT_OK(adam_set.Set(
      adam, -1, HyperParametersFromJson(R"({"betas": [0.95, 0.99]})")));
  EXPECT_EQ(SettableHyperParameters(adam, -1, adam_set).DebugString(),
            HyperParametersFromJson(
                R"({"lr": 0.001, "weight_decay": 0.01,
                      "betas": [0.95, 0.99], "eps": 1e-8})")
                .DebugString());
}

struct OverrideCase {
  std::string name;
  int group;
  std::string changes;  // OptimizerHyperParameters JSON
  std::string error;
};

class BadOverrideTest : public ::testing::TestWithParam<OverrideCase> {};

TEST_P(BadOverrideTest, IsRefusedNamingTheFieldAndChangesNothing) {
  const OptimizerSpec sgd = OptimizerFromJson(R"({
    "kind": "SGD",
    "hyper_parameters": {"lr": 0.1, "momentum": 0.9},
    "param_groups": [{"params": ["b*"], "hyper_parameters": {"momentum": 0}}]
  })");
  HyperParameterOverrides set;
  EXPECT_THAT(set.Set(sgd, GetParam().group,
                      HyperParametersFromJson(GetParam().changes)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(GetParam().error)));
  EXPECT_EQ(set.Get(GetParam().group), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Changes, BadOverrideTest,
    ::testing::ValuesIn(std::vector<OverrideCase>{
        {"NoSuchGroup", 1, R"({"lr": 0.1})",
         "parameter group 1 does not exist: -1 is the default group, 0..0 "
         "the optimizer's param_groups (1 group)"},
        {"BelowTheDefault", -2, R"({"lr": 0.1})",
         "parameter group -2 does not exist"},
        {"LrOutOfRange", -1, R"({"lr": 0})",
         "optimizer.hyper_parameters.lr: must be in (0, 1e+06], got 0"},
        {"NotTheKinds", -1, R"({"betas": [0.9, 0.99]})",
         "optimizer.hyper_parameters.betas: only applies to ADAM, ADAMW and "
         "LION, not SGD"},
        {"FixedBySpec", -1, R"({"nesterov": true})",
         "optimizer.hyper_parameters.nesterov: is fixed by the job spec "
         "(fields that change while training: lr, weight_decay, momentum, "
         "betas, eps, alpha, lr_decay)"},
        {"ScheduleFixed", -1,
         R"({"lr_schedule": {"kind": "cosine", "t_max": 3}})",
         "optimizer.hyper_parameters.lr_schedule: is fixed by the job spec"},
        {"MomentumZero", -1, R"({"momentum": 0})",
         "optimizer.hyper_parameters.momentum: must be > 0 while training"},
        {"NoMomentumBuffer", 0, R"({"momentum": 0.9})",
         "optimizer.param_groups[0].hyper_parameters.momentum: the group "
         "keeps no momentum buffer (its momentum in the job spec is 0)"},
    }),
    [](const ::testing::TestParamInfo<OverrideCase>& info) {
      return info.param.name;
    });

TEST(LrScheduleSpecTest, KindsAreCaseInsensitiveAndCamelCaseWorks) {
  EXPECT_OK(ParseJobSpecJson(ScheduleSpec(
      R"({"kind": "Step", "stepSize": 4, "warmupSteps": 2, "warmupStartFactor": 0.1})")));
  EXPECT_OK(ParseJobSpecJson(ScheduleSpec(R"({})")));
  EXPECT_OK(ParseJobSpecJson(
      ScheduleSpec(R"({"kind": "constant", "warmup_steps": "5"})")));
}

struct ScheduleCase {
  std::string name;
  std::string json;  // the job spec
  std::string error;
};

class BadScheduleTest : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(BadScheduleTest, IsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ParseJobSpecJson(GetParam().json),
              StatusIs(absl::StatusCode::kInvalidArgument, GetParam().error));
}

constexpr char kDefault[] = "optimizer.hyper_parameters.lr_schedule.";
constexpr char kGroup1[] =
    "optimizer.param_groups[1].hyper_parameters.lr_schedule.";

INSTANTIATE_TEST_SUITE_P(
    Fields, BadScheduleTest,
    ::testing::ValuesIn(std::vector<ScheduleCase>{
        {"CosineNeedsTMax", ScheduleSpec("{}", R"({"kind": "cosine"})"),
         absl::StrCat(kGroup1, "t_max: required for COSINE: an integer in [1, 1000000000]")},
        {"StepNeedsStepSize", ScheduleSpec(R"({"kind": "step"})"),
         absl::StrCat(kDefault, "step_size: required for STEP: an integer in [1, 1000000000]")},
        {"TMaxOnStep", ScheduleSpec(R"({"kind": "step", "step_size": 3, "t_max": 4})"),
         absl::StrCat(kDefault, "t_max: only applies to kind COSINE, not STEP")},
        {"GammaOnConstant", ScheduleSpec(R"({"gamma": 0.5})"),
         absl::StrCat(kDefault, "gamma: only applies to kind STEP, not CONSTANT")},
        {"StartFactorOnCosine",
         ScheduleSpec("{}", R"({"kind": "cosine", "t_max": 4, "start_factor": 0.5})"),
         absl::StrCat(kGroup1, "start_factor: only applies to kind LINEAR, not COSINE")},
        {"EtaMinOnLinear", ScheduleSpec(R"({"kind": "linear", "eta_min": 0})"),
         absl::StrCat(kDefault, "eta_min: only applies to kind COSINE, not LINEAR")},
        {"WarmupFactorWithoutWarmup", ScheduleSpec(R"({"warmup_start_factor": 0.1})"),
         absl::StrCat(kDefault, "warmup_start_factor: only applies with warmup_steps > 0")},
        {"WarmupFactorZero",
         ScheduleSpec(R"({"warmup_steps": 2, "warmup_start_factor": 0})"),
         absl::StrCat(kDefault, "warmup_start_factor: must be in (0, 1], got 0")},
        {"WarmupNegative", ScheduleSpec(R"({"warmup_steps": -1})"),
         absl::StrCat(kDefault, "warmup_steps: must be in [0, 1000000000], got -1")},
        {"WarmupHuge", ScheduleSpec(R"({"warmup_steps": 1000000001})"),
         absl::StrCat(kDefault, "warmup_steps: must be in [0, 1000000000], got 1000000001")},
        {"StartFactorZero", ScheduleSpec(R"({"kind": "linear", "start_factor": 0})"),
         absl::StrCat(kDefault, "start_factor: must be in (0, 1], got 0")},
        {"EndFactorAboveOne", ScheduleSpec(R"({"kind": "linear", "end_factor": 1.5})"),
         absl::StrCat(kDefault, "end_factor: must be in [0, 1], got 1.5")},
        {"TotalItersZero", ScheduleSpec(R"({"kind": "linear", "total_iters": 0})"),
         absl::StrCat(kDefault, "total_iters: must be in [1, 1000000000], got 0")},
        {"TMaxNegative", ScheduleSpec("{}", R"({"kind": "cosine", "t_max": -3})"),
         absl::StrCat(kGroup1, "t_max: must be in [1, 1000000000], got -3")},
        {"EtaMinNegative",
         ScheduleSpec("{}", R"({"kind": "cosine", "t_max": 3, "eta_min": -1})"),
         absl::StrCat(kGroup1, "eta_min: must be in [0, 1e+06], got -1")},
        {"GammaZero", ScheduleSpec(R"({"kind": "step", "step_size": 2, "gamma": 0})"),
         absl::StrCat(kDefault, "gamma: must be in (0, 1], got 0")},
        {"GammaNaN",
         ScheduleSpec(R"({"kind": "step", "step_size": 2, "gamma": "NaN"})"),
         absl::StrCat(kDefault, "gamma: must be in (0, 1], got nan")},
        {"UnknownKind", ScheduleSpec(R"({"kind": "exponential"})"),
         std::string("optimizer.hyper_parameters.lr_schedule.kind: unknown value \"exponential\"; valid values: CONSTANT, LINEAR, COSINE, STEP")},
        {"TypoSuggestsTheField", ScheduleSpec(R"({"kind": "cosine", "tmax": 3})"),
         absl::StrCat(kDefault, "tmax: unknown field; did you mean t_max?")},
    }),
    [](const ::testing::TestParamInfo<ScheduleCase>& info) {
      return info.param.name;
    });

TEST(LrScheduleSpecTest, UnknownKindNumberIsRejected) {
  ASSERT_OK_AND_ASSIGN(JobSpec spec, ParseJobSpecJson(ScheduleSpec("{}")));
  spec.mutable_optimizer()->mutable_hyper_parameters()->mutable_lr_schedule()
      ->set_kind(static_cast<v1::LrSchedule::Kind>(9));
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.hyper_parameters.lr_schedule.kind: "
                                 "unknown value 9")));
}

TEST(LrScheduleSpecTest, OptimizerSpecJsonAloneChecksTheSameRules) {
  EXPECT_THAT(ParseOptimizerSpecJson(
                  R"json({"kind": "sgd", "hyper_parameters": {"lr": 0.1,
                      "lr_schedule": {"kind": "cosine"}}})json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.hyper_parameters.lr_schedule.t_max: "
                                 "required for COSINE")));
}

}  // namespace
// Gradient clipping and accumulation (issue 15 items 2 and 3).
TEST(ClippingSpecTest, ParsesMaxGradNormNormTypeAndAccumulation) {
  ASSERT_OK_AND_ASSIGN(
      JobSpec spec,
      ParseJobSpecJson(Replace(
          "\"param_groups\"",
          "\"max_grad_norm\": 1.5, \"norm_type\": \"Infinity\", \"param_groups\"")));
  EXPECT_TRUE(spec.optimizer().has_max_grad_norm());
  EXPECT_EQ(spec.optimizer().max_grad_norm(), 1.5);
  EXPECT_EQ(spec.optimizer().norm_type(), kInfinityNorm);
  ASSERT_OK_AND_ASSIGN(
      spec, ParseJobSpecJson(Replace(
                "\"param_groups\"", "\"maxGradNorm\": 0.5, \"param_groups\"")));
  EXPECT_EQ(spec.optimizer().norm_type(), 0);  // 2 by default
  EXPECT_FALSE(ParseGood().optimizer().has_max_grad_norm());
  ASSERT_OK_AND_ASSIGN(
      spec, ParseJobSpecJson(Replace(
                "\"steps\": 100", "\"steps\": 100, \"gradient_accumulation_steps\": 4")));
  EXPECT_EQ(spec.gradient_accumulation_steps(), 4);
  EXPECT_EQ(ApplyJobSpecDefaults(ParseGood()).gradient_accumulation_steps(), 1);
  ASSERT_OK_AND_ASSIGN(v1::OptimizerSpec optimizer,
                       ParseOptimizerSpecJson(R"json({"kind": "sgd",
                           "hyper_parameters": {"lr": 0.1},
                           "max_grad_norm": 2, "norm_type": 2})json"));
  EXPECT_EQ(optimizer.max_grad_norm(), 2);
}

INSTANTIATE_TEST_SUITE_P(
    Clipping, BadSpecTest,
    ::testing::Values(
        BadCase{"MaxGradNormZero",
                Replace("\"param_groups\"", "\"max_grad_norm\": 0, \"param_groups\""),
                "optimizer.max_grad_norm: must be finite and > 0, got 0"},
        BadCase{"MaxGradNormNegative",
                Replace("\"param_groups\"", "\"max_grad_norm\": -1, \"param_groups\""),
                "optimizer.max_grad_norm: must be finite and > 0, got -1"},
        BadCase{"MaxGradNormInfinite",
                Replace("\"param_groups\"",
                        "\"max_grad_norm\": \"Infinity\", \"param_groups\""),
                "optimizer.max_grad_norm: must be finite and > 0, got inf"},
        BadCase{"MaxGradNormNaN",
                Replace("\"param_groups\"", "\"max_grad_norm\": \"NaN\", \"param_groups\""),
                "optimizer.max_grad_norm: must be finite and > 0, got nan"},
        BadCase{"NormTypeOne",
                Replace("\"param_groups\"",
                        "\"max_grad_norm\": 1, \"norm_type\": 1, \"param_groups\""),
                "optimizer.norm_type: must be 2 or infinity (JSON \"Infinity\"), got 1"},
        BadCase{"NormTypeMinusInfinity",
                Replace("\"param_groups\"",
                        "\"max_grad_norm\": 1, \"norm_type\": \"-Infinity\", "
                        "\"param_groups\""),
                "optimizer.norm_type: must be 2 or infinity"},
        BadCase{"NormTypeNaN",
                Replace("\"param_groups\"",
                        "\"max_grad_norm\": 1, \"norm_type\": \"NaN\", \"param_groups\""),
                "optimizer.norm_type: must be 2 or infinity"},
        BadCase{"NormTypeWithoutMaxNorm",
                Replace("\"param_groups\"", "\"norm_type\": 2, \"param_groups\""),
                "optimizer.norm_type: only with optimizer.max_grad_norm"},
        BadCase{"AccumulationNegative",
                Replace("\"steps\": 100",
                        "\"steps\": 100, \"gradient_accumulation_steps\": -2"),
                "gradient_accumulation_steps: must be in [1, 1000000], got -2"},
        BadCase{"AccumulationHuge",
                Replace("\"steps\": 100",
                        "\"steps\": 100, \"gradient_accumulation_steps\": 1000001"),
                "gradient_accumulation_steps: must be in [1, 1000000], got 1000001"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

// Mixed precision (issue 15 item 1).
TEST(PrecisionSpecTest, ParsesDtypesByName) {
  ASSERT_OK_AND_ASSIGN(
      JobSpec spec,
      ParseJobSpecJson(Replace("\"steps\": 100",
                               "\"steps\": 100, \"precision\": "
                               "{\"param_dtype\": \"BF16\", "
                               "\"reduce_dtype\": \"FP32\"}")));
  EXPECT_EQ(spec.precision().param_dtype(), v1::PrecisionSpec::BF16);
  EXPECT_EQ(spec.precision().reduce_dtype(), v1::PrecisionSpec::FP32);
  // Unset or unspecified is fp32 throughout, on any backend.
  EXPECT_FALSE(ParseGood().has_precision());
  spec.mutable_precision()->set_param_dtype(v1::PrecisionSpec::FP32);
  spec.set_backend(JobSpec::NCCL);
  EXPECT_OK(ValidateJobSpec(spec));
}

INSTANTIATE_TEST_SUITE_P(
    Precision, BadSpecTest,
    ::testing::Values(
        BadCase{"UnknownDtype",
                Replace("\"steps\": 100",
                        "\"steps\": 100, \"precision\": {\"param_dtype\": "
                        "\"FP16\"}"),
                "precision.param_dtype"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(PrecisionSpecTest, OutOfRangeEnumIsRefusedAndProgramsMayAskForBf16) {
  JobSpec spec = ParseGood();
  spec.mutable_precision()->set_reduce_dtype(
      static_cast<v1::PrecisionSpec::DType>(7));
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("precision.reduce_dtype: must be FP32 or "
                                 "BF16, got 7")));
  ASSERT_OK_AND_ASSIGN(spec, ParseJobSpecJson(R"json({
      "name": "p", "world_size": 1,
      "program": {"argv": ["python3", "t.py"]}})json"));
  // The program's session takes it as its default (pshardSetPrecision).
  spec.mutable_precision()->set_param_dtype(v1::PrecisionSpec::BF16);
  EXPECT_OK(ValidateJobSpec(spec));
  // GPU workers too (GpuJob's device masters).
  JobSpec nccl = ParseGood();
  nccl.set_backend(JobSpec::NCCL);
  nccl.mutable_precision()->set_reduce_dtype(v1::PrecisionSpec::BF16);
  EXPECT_OK(ValidateJobSpec(nccl));
}

// GPU jobs checkpoint and resume as CPU jobs do (the GPU optimizer's state
// is read from the device and written back).
TEST(CheckpointSpecTest, NcclJobsMayCheckpointAndResume) {
  JobSpec spec = ParseGood();
  spec.set_backend(JobSpec::NCCL);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.mutable_checkpoint()->set_every_steps(5);
  spec.set_from_checkpoint("/ckpt/step-5");
  EXPECT_OK(ValidateJobSpec(spec));
}

TEST(ClippingSpecTest, ProgramJobsAccumulateThemselves) {
  ASSERT_OK_AND_ASSIGN(JobSpec spec, ParseJobSpecJson(R"json({
      "name": "p", "world_size": 1, "program": {"argv": ["python3", "t.py"]},
      "gradient_accumulation_steps": 1})json"));
  spec.set_gradient_accumulation_steps(4);
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gradient_accumulation_steps: built-in "
                                 "workloads only")));
}

}  // namespace pshard

namespace pshard {
namespace {

// Adagrad, RMSprop, Lion and Adam's amsgrad: torch's defaults (lion-pytorch's
// for Lion), torch's ranges, and fields of other kinds refused by name.
TEST(OptimizerKindsTest, DefaultsAreTorchs) {
  OptimizerSpec opt;
  opt.set_kind(OptimizerSpec::ADAGRAD);
  HyperParameters hp = ResolveHyperParameters(opt, "w");
  EXPECT_DOUBLE_EQ(hp.lr, 1e-2);
  EXPECT_DOUBLE_EQ(hp.lr_decay, 0);
  EXPECT_DOUBLE_EQ(hp.weight_decay, 0);
  EXPECT_DOUBLE_EQ(hp.initial_accumulator_value, 0);
  EXPECT_DOUBLE_EQ(hp.eps, 1e-10);

  opt.set_kind(OptimizerSpec::RMSPROP);
  hp = ResolveHyperParameters(opt, "w");
  EXPECT_DOUBLE_EQ(hp.lr, 1e-2);
  EXPECT_DOUBLE_EQ(hp.alpha, 0.99);
  EXPECT_DOUBLE_EQ(hp.eps, 1e-8);
  EXPECT_DOUBLE_EQ(hp.weight_decay, 0);
  EXPECT_DOUBLE_EQ(hp.momentum, 0);
  EXPECT_FALSE(hp.centered);

  opt.set_kind(OptimizerSpec::LION);
  hp = ResolveHyperParameters(opt, "w");
  EXPECT_DOUBLE_EQ(hp.lr, 1e-4);
  EXPECT_DOUBLE_EQ(hp.beta1, 0.9);
  EXPECT_DOUBLE_EQ(hp.beta2, 0.99);
  EXPECT_DOUBLE_EQ(hp.weight_decay, 0);

  opt.set_kind(OptimizerSpec::ADAMW);
  EXPECT_FALSE(ResolveHyperParameters(opt, "w").amsgrad);
}

TEST(OptimizerKindsTest, GroupsOverrideTheNewFields) {
  ASSERT_OK_AND_ASSIGN(
      OptimizerSpec opt,
      ParseOptimizerSpecJson(R"json({"kind": "rmsprop",
          "hyper_parameters": {"alpha": 0.9, "momentum": 0.5, "centered": true},
          "param_groups": [{"params": ["*.bias"],
                            "hyper_parameters": {"centered": false,
                                                 "eps": 0}}]})json"));
  const HyperParameters weight = ResolveHyperParameters(opt, "l.weight");
  EXPECT_TRUE(weight.centered);
  EXPECT_DOUBLE_EQ(weight.alpha, 0.9);
  const HyperParameters bias = ResolveHyperParameters(opt, "l.bias");
  EXPECT_FALSE(bias.centered);
  EXPECT_DOUBLE_EQ(bias.momentum, 0.5);
  EXPECT_DOUBLE_EQ(bias.eps, 0);
  EXPECT_FALSE(weight == bias);

  ASSERT_OK_AND_ASSIGN(
      opt, ParseOptimizerSpecJson(R"json({"kind": "adagrad",
          "hyper_parameters": {"lr_decay": 0.01, "initialAccumulatorValue": 0.1,
                               "weight_decay": 0.001}})json"));
  EXPECT_DOUBLE_EQ(ResolveHyperParameters(opt, "w").lr_decay, 0.01);
  EXPECT_DOUBLE_EQ(ResolveHyperParameters(opt, "w").initial_accumulator_value,
                   0.1);
  ASSERT_OK_AND_ASSIGN(
      opt, ParseOptimizerSpecJson(R"json({"kind": "lion",
          "hyper_parameters": {"betas": [0.95, 1.0], "weight_decay": 1.5}})json"));
  EXPECT_DOUBLE_EQ(ResolveHyperParameters(opt, "w").beta2, 1.0);
  ASSERT_OK_AND_ASSIGN(
      opt, ParseOptimizerSpecJson(
               R"json({"kind": "adam", "hyper_parameters": {"amsgrad": true}})json"));
  EXPECT_TRUE(ResolveHyperParameters(opt, "w").amsgrad);
}

struct KindCase {
  std::string name;
  std::string json;  // an OptimizerSpec
  std::string error;
};

class BadOptimizerFieldTest : public ::testing::TestWithParam<KindCase> {};

TEST_P(BadOptimizerFieldTest, IsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ParseOptimizerSpecJson(GetParam().json),
              StatusIs(absl::StatusCode::kInvalidArgument, GetParam().error));
}

constexpr char kHp[] = "optimizer.hyper_parameters.";

INSTANTIATE_TEST_SUITE_P(
    Fields, BadOptimizerFieldTest,
    ::testing::ValuesIn(std::vector<KindCase>{
        // Fields of other kinds.
        {"LrDecayOnAdam", R"({"kind": "adam", "hyper_parameters": {"lr_decay": 0.1}})",
         absl::StrCat(kHp, "lr_decay: only applies to ADAGRAD, not ADAM")},
        {"InitialAccumulatorOnRmsprop",
         R"({"kind": "rmsprop", "hyper_parameters": {"initial_accumulator_value": 0.1}})",
         absl::StrCat(kHp, "initial_accumulator_value: only applies to ADAGRAD, not RMSPROP")},
        {"AlphaOnAdagrad", R"({"kind": "adagrad", "hyper_parameters": {"alpha": 0.9}})",
         absl::StrCat(kHp, "alpha: only applies to RMSPROP, not ADAGRAD")},
        {"CenteredOnSgd",
         R"({"kind": "sgd", "hyper_parameters": {"lr": 0.1, "centered": true}})",
         absl::StrCat(kHp, "centered: only applies to RMSPROP, not SGD")},
        {"AmsgradOnLion", R"({"kind": "lion", "hyper_parameters": {"amsgrad": false}})",
         absl::StrCat(kHp, "amsgrad: only applies to ADAM and ADAMW, not LION")},
        {"EpsOnLion", R"({"kind": "lion", "hyper_parameters": {"eps": 1e-8}})",
         absl::StrCat(kHp, "eps: only applies to ADAM, ADAMW, ADAGRAD and RMSPROP, not LION")},
        {"BetasOnRmsprop",
         R"({"kind": "rmsprop", "param_groups": [{"params": ["*"],
             "hyper_parameters": {"betas": [0.9, 0.9]}}]})",
         "optimizer.param_groups[0].hyper_parameters.betas: only applies to "
         "ADAM, ADAMW and LION, not RMSPROP"},
        {"MomentumOnAdagrad", R"({"kind": "adagrad", "hyper_parameters": {"momentum": 0.9}})",
         absl::StrCat(kHp, "momentum: only applies to SGD and RMSPROP, not ADAGRAD")},
        {"NesterovOnRmsprop", R"({"kind": "rmsprop", "hyper_parameters": {"nesterov": true}})",
         absl::StrCat(kHp, "nesterov: only applies to SGD, not RMSPROP")},
        {"DampeningOnLion", R"({"kind": "lion", "hyper_parameters": {"dampening": 0.1}})",
         absl::StrCat(kHp, "dampening: only applies to SGD, not LION")},
        // Ranges.
        {"LrDecayNegative", R"({"kind": "adagrad", "hyper_parameters": {"lr_decay": -0.1}})",
         absl::StrCat(kHp, "lr_decay: must be in [0, 1e+06], got -0.1")},
        {"InitialAccumulatorNegative",
         R"({"kind": "adagrad", "hyper_parameters": {"initial_accumulator_value": -1}})",
         absl::StrCat(kHp, "initial_accumulator_value: must be in [0, 1e+06], got -1")},
        {"AdagradEpsNegative", R"({"kind": "adagrad", "hyper_parameters": {"eps": -1e-10}})",
         absl::StrCat(kHp, "eps: must be in [0, 1], got -1e-10")},
        {"AdagradWeightDecayNegative",
         R"({"kind": "adagrad", "hyper_parameters": {"weight_decay": -1}})",
         absl::StrCat(kHp, "weight_decay: must be in [0, 1e+06], got -1")},
        {"AlphaAboveOne", R"({"kind": "rmsprop", "hyper_parameters": {"alpha": 1.5}})",
         absl::StrCat(kHp, "alpha: must be in [0, 1], got 1.5")},
        {"AlphaNaN", R"({"kind": "rmsprop", "hyper_parameters": {"alpha": "NaN"}})",
         absl::StrCat(kHp, "alpha: must be in [0, 1], got nan")},
        {"RmspropMomentumOne", R"({"kind": "rmsprop", "hyper_parameters": {"momentum": 1}})",
         absl::StrCat(kHp, "momentum: must be in [0, 1), got 1")},
        {"RmspropEpsNegative", R"({"kind": "rmsprop", "hyper_parameters": {"eps": -1}})",
         absl::StrCat(kHp, "eps: must be in [0, 1], got -1")},
        {"RmspropLrZero", R"({"kind": "rmsprop", "hyper_parameters": {"lr": 0}})",
         absl::StrCat(kHp, "lr: must be in (0, 1e+06], got 0")},
        {"LionBetaAboveOne", R"({"kind": "lion", "hyper_parameters": {"betas": [0.9, 1.1]}})",
         absl::StrCat(kHp, "betas[1]: must be in [0, 1], got 1.1")},
        {"LionOneBeta", R"({"kind": "lion", "hyper_parameters": {"betas": [0.9]}})",
         absl::StrCat(kHp, "betas: must have exactly 2 values, got 1")},
        {"LionWeightDecayNegative",
         R"({"kind": "lion", "hyper_parameters": {"weight_decay": -0.1}})",
         absl::StrCat(kHp, "weight_decay: must be in [0, 1e+06], got -0.1")},
        {"AdamEpsStillPositive",
         R"({"kind": "adamw", "hyper_parameters": {"amsgrad": true, "eps": 0}})",
         absl::StrCat(kHp, "eps: must be in (0, 1], got 0")},
        {"UnknownKind", R"({"kind": "adadelta"})",
         "optimizer.kind: unknown value \"adadelta\"; valid values: SGD, ADAM, "
         "ADAMW, ADAGRAD, RMSPROP, LION"},
    }),
    [](const ::testing::TestParamInfo<KindCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace pshard
