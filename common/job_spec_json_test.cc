// The messages a person sees for a job spec that is not right as JSON: each
// names the place and says what is wrong in the spec's own terms.
#include "common/job_spec_json.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Lines 1-9; "hidden_dims" is on line 5.
constexpr char kSpec[] = R"json({
  "name": "demo",
  "world_size": 2,
  "backend": "gloo",
  "mlp": {"input_dim": 4, "hidden_dims": [8, 8], "output_dim": 2, "batch_size": 4},
  "optimizer": {"kind": "adam", "hyper_parameters": {"lr": 0.01}},
  "program_placeholder": 0,
  "steps": 10
})json";

// kSpec with `from` replaced by `to` (and the placeholder line removed).
std::string Spec(absl::string_view from, absl::string_view to) {
  std::string json = absl::StrReplaceAll(
      kSpec, {{"  \"program_placeholder\": 0,\n", ""}});
  const std::string replaced = absl::StrReplaceAll(json, {{from, to}});
  EXPECT_NE(replaced, json) << "replacement did not apply: " << from;
  return replaced;
}

struct Case {
  std::string name;
  std::string json;
  std::string message;  // the whole message
};

class JobSpecJsonErrorTest : public ::testing::TestWithParam<Case> {};

TEST_P(JobSpecJsonErrorTest, SaysExactlyWhatIsWrong) {
  const absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(GetParam().json);
  EXPECT_THAT(spec, StatusIs(absl::StatusCode::kInvalidArgument,
                             GetParam().message));
  // Never protobuf's own type names.
  EXPECT_THAT(spec.status().message(),
              Not(HasSubstr("TYPE_")));
  EXPECT_THAT(spec.status().message(), Not(HasSubstr("googleapis")));
  EXPECT_THAT(spec.status().message(), Not(HasSubstr("\n")));
}

INSTANTIATE_TEST_SUITE_P(
    Messages, JobSpecJsonErrorTest,
    ::testing::Values(
        Case{"MissingRequired", Spec("  \"world_size\": 2,\n", ""),
             "world_size: required: an integer in [1, 4096]"},
        Case{"MissingRequiredNested", Spec("\"input_dim\": 4, ", ""),
             "mlp.input_dim: required: an integer in [1, 65536]"},
        Case{"EnumListsValidValues", Spec("\"gloo\"", "\"mpi\""),
             "backend: unknown value \"mpi\"; valid values: AUTO, NCCL, GLOO"},
        Case{"EnumNumberWithoutName", Spec("\"gloo\"", "7"),
             "backend: unknown value 7; valid values: AUTO, NCCL, GLOO"},
        Case{"TypoSuggestsTheField", Spec("\"world_size\"", "\"world_sise\""),
             "world_sise: unknown field; did you mean world_size?"},
        Case{"TypoInANestedMessage", Spec("\"input_dim\"", "\"inputdims\""),
             "mlp.inputdims: unknown field; did you mean input_dim?"},
        Case{"CamelCaseTypoSuggestsTheField",
             Spec("\"world_size\"", "\"worldSise\""),
             "worldSise: unknown field; did you mean world_size?"},
        Case{"NoNearField", Spec("\"steps\": 10", "\"zzzzzzzz\": 10"),
             "zzzzzzzz: unknown field (fields: name, world_size, backend, "
             "mlp, synthetic, replay, program, bucket_cap_mb, "
             "assignment_policy, comm_mode, optimizer, steps, seed, "
             "output_dir, progress_every, collective_timeout_seconds, "
             "checkpoint, max_restarts, min_world_size, from_checkpoint, "
             "restart_on_program_failure, priority, "
             "gradient_accumulation_steps, overlap_param_broadcast, "
             "precision)"},
        Case{"NoNearFieldInASchedule",
             Spec("{\"lr\": 0.01}",
                  "{\"lr\": 0.01, \"lr_schedule\": {\"zzzzzzzz\": 1}}"),
             "optimizer.hyper_parameters.lr_schedule.zzzzzzzz: unknown field "
             "(its fields: kind, warmup_steps, warmup_start_factor, "
             "start_factor, end_factor, total_iters, t_max, eta_min, "
             "step_size, gamma)"},
        Case{"NoNearFieldInHyperParameters",
             Spec("{\"lr\": 0.01}", "{\"lr\": 0.01, \"zzzzzzzz\": 1}"),
             "optimizer.hyper_parameters.zzzzzzzz: unknown field (its fields: "
             "lr, momentum, dampening, nesterov, weight_decay, betas, eps, "
             "lr_schedule, lr_decay, initial_accumulator_value, alpha, "
             "centered, amsgrad)"},
        Case{"TypoInANewOptimizerField",
             Spec("{\"lr\": 0.01}", "{\"lr\": 0.01, \"amsgrd\": true}"),
             "optimizer.hyper_parameters.amsgrd: unknown field; did you mean "
             "amsgrad?"},
        Case{"SyntaxErrorLineAndColumn",
             Spec("\"world_size\": 2", "\"world_size\" 2"),
             "JSON syntax error at line 3, column 16: Expected : between "
             "key:value pair."},
        Case{"SyntaxErrorNearTheStart", "{\"name\" 1}",
             "JSON syntax error at line 1, column 9: Expected : between "
             "key:value pair."},
        Case{"UnfinishedText", "{\"name\": \"demo\",\n  \"world_size\": [2",
             "JSON syntax error at line 2, column 19: Unexpected end of "
             "string. Expected , or ] after array value."},
        Case{"Empty", " \n", "empty: expected a JSON object"},
        Case{"NotAnObject", "[1, 2]", "must be a JSON object, got a list"},
        Case{"NullInAList", Spec("[8, 8]", "[null, 8]"),
             "mlp.hidden_dims[0]: null is not allowed in a list"},
        Case{"NumberForAList", Spec("[8, 8]", "8"),
             "mlp.hidden_dims: must be a list, got 8"},
        Case{"StringForAnInteger", Spec("\"world_size\": 2",
                                        "\"world_size\": \"two\""),
             "world_size: must be an integer, got \"two\""},
        Case{"FractionForAnInteger", Spec("\"world_size\": 2",
                                          "\"world_size\": 1.5"),
             "world_size: must be an integer, got 1.5"},
        Case{"IntegerOutOfRange", Spec("\"world_size\": 2",
                                       "\"world_size\": 99999999999"),
             "world_size: must be an integer in [-2147483648, 2147483647], "
             "got 99999999999"},
        Case{"NegativeUnsigned", Spec("\"steps\": 10",
                                      "\"steps\": 10, \"seed\": -1"),
             "seed: must be an integer in [0, 2^64-1], got -1"},
        Case{"NumberForAString", Spec("\"demo\"", "3"),
             "name: must be a string, got 3"},
        Case{"ScalarForAnObject", Spec("\"optimizer\": {\"kind\": \"adam\", "
                                       "\"hyper_parameters\": {\"lr\": 0.01}}",
                                       "\"optimizer\": \"adam\""),
             "optimizer: must be an object, got \"adam\""},
        Case{"TwoWorkloads",
             Spec("\"steps\": 10", "\"steps\": 10, \"synthetic\": {}"),
             "workload: only one of mlp, synthetic, replay, program, got mlp "
             "and synthetic"},
        Case{"DuplicateKey", Spec("\"steps\": 10", "\"steps\": 10, \"steps\": 11"),
             "duplicate key \"steps\""},
        Case{"NullMapValue",
             Spec("\"mlp\": {\"input_dim\": 4, \"hidden_dims\": [8, 8], "
                  "\"output_dim\": 2, \"batch_size\": 4}",
                  "\"program\": {\"argv\": [\"x\"], \"env\": {\"A\": null}}"),
             "program.env[\"A\"]: must be a string, got null"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(JobSpecJsonTest, TheGoodSpecParses) {
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec spec,
      ParseJobSpecJson(absl::StrReplaceAll(
          kSpec, {{"  \"program_placeholder\": 0,\n", ""}})));
  EXPECT_EQ(spec.world_size(), 2);
  EXPECT_EQ(spec.backend(), v1::JobSpec::GLOO);
  EXPECT_EQ(spec.mlp().hidden_dims_size(), 2);
}

TEST(JobSpecJsonTest, NullLeavesASingleFieldUnsetAsProtobufSays) {
  ASSERT_OK_AND_ASSIGN(v1::JobSpec spec,
                       ParseJobSpecJson(Spec("\"steps\": 10",
                                             "\"steps\": 10, \"seed\": null")));
  EXPECT_EQ(spec.seed(), 0u);
}

TEST(JobSpecJsonTest, ProtobufMappingsStillWork) {
  // lowerCamelCase names, enum names in any case, integers in quotes,
  // "NaN" for a double (refused later by the range check, not the parse).
  ASSERT_OK_AND_ASSIGN(
      v1::JobSpec spec,
      ParseJobSpecJson(Spec("\"world_size\": 2", "\"worldSize\": \"2\"")));
  EXPECT_EQ(spec.world_size(), 2);
  EXPECT_THAT(ParseJobSpecJson(Spec("\"steps\": 10",
                                    "\"steps\": 10, \"bucket_cap_mb\": \"NaN\"")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bucket_cap_mb: must be in")));
}

TEST(JobSpecJsonTest, OptimizerPathsArePrefixed) {
  EXPECT_THAT(ParseOptimizerSpecJson(R"({"kind": "adm"})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "optimizer.kind: unknown value \"adm\"; valid values: "
                       "SGD, ADAM, ADAMW, ADAGRAD, RMSPROP, LION"));
  EXPECT_THAT(ParseOptimizerSpecJson(R"({"kind": })"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "optimizer: JSON syntax error at line 1, column 10: "
                       "Unexpected token."));
  EXPECT_THAT(
      ParseOptimizerSpecJson(R"({"kind": "adam", "hyper_parameters": {"betas": [0.9, null]}})"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "optimizer.hyper_parameters.betas[1]: null is not allowed in a "
               "list"));
}

}  // namespace
}  // namespace pshard
