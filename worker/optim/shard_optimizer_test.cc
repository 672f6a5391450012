#include "worker/optim/shard_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/lr_schedule.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {
namespace {

using ::testing::HasSubstr;

// One case of testdata/golden.txt (see make_golden.py for the format).
struct GoldenCase {
  std::string name;
  std::string optimizer_json;
  std::vector<ParamSpan> spans;
  std::vector<float> params;
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> expected;
};

std::vector<float> ReadFloats(std::istringstream& line) {
  int64_t n = 0;
  line >> n;
  std::vector<float> values(n);
  for (float& v : values) line >> v;
  return values;
}

std::vector<GoldenCase> LoadGolden() {
  std::ifstream in("worker/optim/testdata/golden.txt");
  EXPECT_TRUE(in.good()) << "cannot open worker/optim/testdata/golden.txt";
  std::vector<GoldenCase> cases;
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream line(text);
    std::string tag;
    line >> tag;
    if (tag == "case") {
      cases.emplace_back();
      line >> cases.back().name;
    } else if (tag == "optimizer") {
      std::getline(line >> std::ws, cases.back().optimizer_json);
    } else if (tag == "span") {
      ParamSpan span;
      line >> span.name >> span.offset >> span.numel;
      cases.back().spans.push_back(span);
    } else if (tag == "params") {
      cases.back().params = ReadFloats(line);
    } else if (tag == "grad") {
      cases.back().grads.push_back(ReadFloats(line));
    } else if (tag == "expect") {
      cases.back().expected.push_back(ReadFloats(line));
    } else if (tag != "end") {
      ADD_FAILURE() << "unknown golden record: " << tag;
    }
  }
  return cases;
}

v1::OptimizerSpec ParseOptimizer(const std::string& json) {
  v1::OptimizerSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return spec;
}

int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::abs(static_cast<int64_t>(ia) - ib);
}

TEST(ShardOptimizerGoldenTest, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GE(cases.size(), 27u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.grads.size(), c.expected.size());
    ASSERT_GE(c.grads.size(), 3u);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ShardOptimizer> opt,
                         ShardOptimizer::Create(ParseOptimizer(c.optimizer_json)));
    // The bucket's index is arbitrary; use a non-zero one.
    ASSERT_OK(opt->AddBucket(7, c.spans));
    std::vector<float> params = c.params;
    int64_t max_ulp = 0;
    for (size_t step = 0; step < c.grads.size(); ++step) {
      ASSERT_EQ(c.grads[step].size(), params.size());
      ASSERT_OK(opt->Step(7, params.data(), c.grads[step].data()));
      for (size_t i = 0; i < params.size(); ++i) {
        const float want = c.expected[step][i];
        ASSERT_LE(std::abs(params[i] - want),
                  1e-6 * std::max(std::abs(want), 1e-3f))
            << "step " << step + 1 << " element " << i << ": got " << params[i]
            << ", torch " << want;
        max_ulp = std::max(max_ulp, UlpDistance(params[i], want));
      }
    }
    // Same formulas and operation order as torch's AVX2 kernels: expect bit
    // equality; the 1e-6 bound above is the contract.
    EXPECT_EQ(max_ulp, 0) << "largest difference from torch in ulp";
  }
}

v1::OptimizerSpec Adam() {
  v1::OptimizerSpec spec;
  spec.set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_hyper_parameters()->set_lr(1e-3);
  return spec;
}

TEST(ShardOptimizerTest, AllocatesStateOnlyForAddedBuckets) {
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(Adam()));
  EXPECT_EQ(opt->total_state_bytes(), 0);
  ASSERT_OK(opt->AddBucket(3, {{"a", 0, 100}, {"b", 100, 28}}));
  ASSERT_OK(opt->AddBucket(5, {{"c", 0, 10}}));
  // Adam: exp_avg and exp_avg_sq, fp32 each.
  EXPECT_EQ(opt->state_bytes(3), 128 * 8);
  EXPECT_EQ(opt->state_bytes(5), 10 * 8);
  EXPECT_EQ(opt->state_bytes(0), 0);
  EXPECT_EQ(opt->state_bytes(4), 0);
  EXPECT_EQ(opt->total_state_bytes(), 138 * 8);
}

TEST(ShardOptimizerTest, SgdStateOnlyWhereMomentumIsUsed) {
  v1::OptimizerSpec spec;
  spec.set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_hyper_parameters()->set_lr(0.1);
  ASSERT_OK_AND_ASSIGN(auto plain, ShardOptimizer::Create(spec));
  ASSERT_OK(plain->AddBucket(0, {{"w", 0, 64}}));
  EXPECT_EQ(plain->state_bytes(0), 0);

  spec.mutable_hyper_parameters()->set_momentum(0.9);
  v1::ParamGroup* group = spec.add_param_groups();
  group->add_params("*.bias");
  group->mutable_hyper_parameters()->set_momentum(0);
  ASSERT_OK_AND_ASSIGN(auto mixed, ShardOptimizer::Create(spec));
  ASSERT_OK(mixed->AddBucket(0, {{"l.bias", 0, 16}, {"l.weight", 16, 48}}));
  EXPECT_EQ(mixed->state_bytes(0), 48 * 4);
}

// A checkpoint: 3 steps, export, import into a fresh optimizer, 2 more steps
// give the bits of 5 straight steps; a mismatched state changes nothing.
TEST(ShardOptimizerTest, ExportedStateResumesBitIdentically) {
  const std::vector<ParamSpan> spans = {{"w", 0, 40}, {"b", 48, 8}};
  auto grads = [](int step) {
    std::vector<float> g(56);
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * i + step);
    return g;
  };
  std::vector<float> straight(56, 0.5f);
  ASSERT_OK_AND_ASSIGN(auto first, ShardOptimizer::Create(Adam()));
  ASSERT_OK(first->AddBucket(3, spans));
  for (int step = 1; step <= 5; ++step) {
    ASSERT_OK(first->Step(3, straight.data(), grads(step).data()));
  }

  std::vector<float> resumed(56, 0.5f);
  ASSERT_OK_AND_ASSIGN(auto before, ShardOptimizer::Create(Adam()));
  ASSERT_OK(before->AddBucket(3, spans));
  for (int step = 1; step <= 3; ++step) {
    ASSERT_OK(before->Step(3, resumed.data(), grads(step).data()));
  }
  ASSERT_OK_AND_ASSIGN(BucketState state, before->ExportState(3));
  EXPECT_EQ(state.steps, 3);
  ASSERT_EQ(state.spans.size(), 2u);
  EXPECT_EQ(state.spans[0].name, "w");
  EXPECT_EQ(state.spans[1].numel, 8);
  ASSERT_EQ(state.spans[0].tensors.size(), 2u);
  EXPECT_EQ(state.spans[0].tensors[0].first, "exp_avg");
  EXPECT_EQ(state.spans[0].tensors[1].first, "exp_avg_sq");
  EXPECT_NE(state.spans[0].tensors[1].second[0], 0.0f);

  ASSERT_OK_AND_ASSIGN(auto after, ShardOptimizer::Create(Adam()));
  ASSERT_OK(after->AddBucket(3, spans));
  BucketState wrong = state;
  wrong.spans[1].name = "c";
  EXPECT_THAT(after->ImportState(3, wrong),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'c'")));
  wrong = state;
  wrong.spans[0].tensors[0].second.pop_back();
  EXPECT_THAT(after->ImportState(3, wrong),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exp_avg")));
  EXPECT_THAT(after->ImportState(4, state),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not owned")));
  ASSERT_OK(after->ImportState(3, state));
  for (int step = 4; step <= 5; ++step) {
    ASSERT_OK(after->Step(3, resumed.data(), grads(step).data()));
  }
  for (size_t i = 0; i < straight.size(); ++i) {
    ASSERT_EQ(std::memcmp(&straight[i], &resumed[i], 4), 0) << "element " << i;
  }
}

// The schedule runs on each bucket's own step count, which the exported
// state carries: a resumed bucket continues its schedule where it stopped
// (as a torch scheduler restored with its last_epoch), not from step 0.
TEST(ShardOptimizerTest, ImportedStateContinuesTheLrSchedule) {
  v1::OptimizerSpec spec = ParseOptimizer(R"json({"kind": "SGD",
      "hyper_parameters": {"lr": 0.5, "lr_schedule": {"kind": "COSINE",
          "t_max": 6, "warmup_steps": 2}}})json");
  const std::vector<ParamSpan> spans = {{"w", 0, 4}};
  const std::vector<float> grad = {1, 2, -1, 0.5f};
  std::vector<float> straight(4, 0);
  ASSERT_OK_AND_ASSIGN(auto first, ShardOptimizer::Create(spec));
  ASSERT_OK(first->AddBucket(0, spans));
  std::vector<float> want(4, 0);
  const HyperParameters hp = ResolveHyperParameters(spec, "w");
  for (int step = 1; step <= 8; ++step) {
    ASSERT_OK(first->Step(0, straight.data(), grad.data()));
    // Plain SGD: each step moves by exactly -lr(step) * grad.
    const float lr = static_cast<float>(
        ScheduledLearningRate(hp.lr, hp.lr_schedule, step - 1));
    for (int i = 0; i < 4; ++i) want[i] += -lr * grad[i];
  }
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(straight[i], want[i]);

  std::vector<float> resumed(4, 0);
  ASSERT_OK_AND_ASSIGN(auto before, ShardOptimizer::Create(spec));
  ASSERT_OK(before->AddBucket(0, spans));
  for (int step = 1; step <= 3; ++step) {
    ASSERT_OK(before->Step(0, resumed.data(), grad.data()));
  }
  ASSERT_OK_AND_ASSIGN(BucketState state, before->ExportState(0));
  EXPECT_EQ(state.steps, 3);
  ASSERT_OK_AND_ASSIGN(auto after, ShardOptimizer::Create(spec));
  ASSERT_OK(after->AddBucket(0, spans));
  ASSERT_OK(after->ImportState(0, state));
  for (int step = 4; step <= 8; ++step) {
    ASSERT_OK(after->Step(0, resumed.data(), grad.data()));
  }
  for (size_t i = 0; i < straight.size(); ++i) {
    ASSERT_EQ(std::memcmp(&straight[i], &resumed[i], 4), 0) << "element " << i;
  }
}

// Every kind keeps torch's state tensors, by torch's names, only where its
// options need them; exported state resumes bit-identically.
TEST(ShardOptimizerTest, StateTensorsHaveTorchsNamesPerKindAndGroup) {
  struct Case {
    const char* json;
    // Expected state names of "w" and of "b" (a "*.bias"-like group).
    std::vector<std::string> w, b;
    int64_t state_bytes;  // bucket of w (6 elements) and b (2)
  };
  const Case cases[] = {
      {R"({"kind":"ADAM","hyperParameters":{"amsgrad":true},)"
       R"("paramGroups":[{"params":["b"],"hyperParameters":{"amsgrad":false}}]})",
       {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
       {"exp_avg", "exp_avg_sq"},
       3 * 8 * 4},
      {R"({"kind":"ADAGRAD","hyperParameters":{"initialAccumulatorValue":0.25}})",
       {"sum"}, {"sum"}, 8 * 4},
      {R"({"kind":"RMSPROP","hyperParameters":{"momentum":0.9},)"
       R"("paramGroups":[{"params":["b"],"hyperParameters":{"momentum":0,"centered":true}}]})",
       {"square_avg", "momentum_buffer"},
       {"square_avg", "grad_avg"},
       3 * 8 * 4},
      {R"({"kind":"RMSPROP"})", {"square_avg"}, {"square_avg"}, 8 * 4},
      {R"({"kind":"LION","hyperParameters":{"weightDecay":0.1}})", {"exp_avg"},
       {"exp_avg"}, 8 * 4},
  };
  const std::vector<ParamSpan> spans = {{"w", 0, 6}, {"b", 6, 2}};
  auto grads = [](int step) {
    std::vector<float> g(8);
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7f * i + step);
    return g;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    const v1::OptimizerSpec spec = ParseOptimizer(c.json);
    ASSERT_OK_AND_ASSIGN(auto first, ShardOptimizer::Create(spec));
    ASSERT_OK(first->AddBucket(0, spans));
    EXPECT_EQ(first->state_bytes(0), c.state_bytes);
    std::vector<float> straight(8, 0.5f);
    for (int step = 1; step <= 5; ++step) {
      ASSERT_OK(first->Step(0, straight.data(), grads(step).data()));
    }
    ASSERT_OK_AND_ASSIGN(auto before, ShardOptimizer::Create(spec));
    ASSERT_OK(before->AddBucket(0, spans));
    std::vector<float> resumed(8, 0.5f);
    for (int step = 1; step <= 2; ++step) {
      ASSERT_OK(before->Step(0, resumed.data(), grads(step).data()));
    }
    ASSERT_OK_AND_ASSIGN(BucketState state, before->ExportState(0));
    ASSERT_EQ(state.spans.size(), 2u);
    for (int s = 0; s < 2; ++s) {
      std::vector<std::string> names;
      for (const auto& [name, values] : state.spans[s].tensors) {
        names.push_back(name);
        EXPECT_EQ(values.size(), spans[s].numel);
      }
      EXPECT_EQ(names, s == 0 ? c.w : c.b);
    }
    ASSERT_OK_AND_ASSIGN(auto after, ShardOptimizer::Create(spec));
    ASSERT_OK(after->AddBucket(0, spans));
    BucketState wrong = state;
    wrong.spans[1].tensors.pop_back();
    if (wrong.spans[1].tensors.empty()) {
      wrong.spans[1].tensors.emplace_back("exp_avg_sq",
                                          std::vector<float>(2));
    }
    EXPECT_THAT(after->ImportState(0, wrong),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'b'")));
    ASSERT_OK(after->ImportState(0, state));
    for (int step = 3; step <= 5; ++step) {
      ASSERT_OK(after->Step(0, resumed.data(), grads(step).data()));
    }
    EXPECT_EQ(std::memcmp(straight.data(), resumed.data(), 8 * 4), 0);
  }
}

// Adagrad's "sum" starts at the group's initial_accumulator_value (as
// torch.full_like), not at zero.
TEST(ShardOptimizerTest, AdagradSumStartsAtTheInitialAccumulatorValue) {
  const v1::OptimizerSpec spec = ParseOptimizer(
      R"({"kind":"ADAGRAD","hyperParameters":{"initialAccumulatorValue":0.1},)"
      R"("paramGroups":[{"params":["b"],"hyperParameters":{"initialAccumulatorValue":0}}]})");
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(spec));
  ASSERT_OK(opt->AddBucket(0, {{"w", 0, 3}, {"b", 4, 2}}));
  ASSERT_OK_AND_ASSIGN(BucketState state, opt->ExportState(0));
  ASSERT_EQ(state.spans.size(), 2u);
  EXPECT_EQ(state.spans[0].tensors[0].second,
            std::vector<float>(3, static_cast<float>(0.1)));
  EXPECT_EQ(state.spans[1].tensors[0].second, std::vector<float>(2, 0.0f));
}

TEST(ShardOptimizerTest, StepOnUnownedBucketIsNotFound) {
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(Adam()));
  ASSERT_OK(opt->AddBucket(1, {{"a", 0, 4}}));
  std::vector<float> p(4), g(4);
  EXPECT_THAT(opt->Step(0, p.data(), g.data()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("bucket 0")));
  EXPECT_THAT(opt->Step(-1, p.data(), g.data()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("bucket -1")));
  EXPECT_OK(opt->Step(1, p.data(), g.data()));
  EXPECT_THAT(opt->Step(1, nullptr, g.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
}

TEST(ShardOptimizerTest, RejectsBadSpans) {
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(Adam()));
  EXPECT_THAT(opt->AddBucket(0, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no parameter")));
  EXPECT_THAT(opt->AddBucket(0, {{"a", 0, 10}, {"b", 9, 4}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'a' [0, 10) and 'b' [9, 13) overlap")));
  EXPECT_THAT(opt->AddBucket(0, {{"a", -1, 10}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a'")));
  EXPECT_THAT(opt->AddBucket(0, {{"a", 0, -3}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a'")));
  EXPECT_THAT(opt->AddBucket(0, {{"a", int64_t{1} << 62, 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a'")));
  EXPECT_THAT(opt->AddBucket(0, {{"a", 0, 1}, {"a", 1, 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(opt->AddBucket(-2, {{"a", 0, 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-2")));
  // Nothing above was added.
  EXPECT_EQ(opt->total_state_bytes(), 0);
  ASSERT_OK(opt->AddBucket(0, {{"b", 4, 4}, {"a", 0, 4}}));  // any order
  EXPECT_THAT(opt->AddBucket(0, {{"c", 0, 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already")));
}

TEST(ShardOptimizerTest, RejectsUnspecifiedKind) {
  v1::OptimizerSpec spec;
  EXPECT_THAT(ShardOptimizer::Create(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("KIND_UNSPECIFIED")));
}

TEST(ShardOptimizerTest, LeavesGapsBetweenSpansUntouched) {
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(Adam()));
  ASSERT_OK(opt->AddBucket(0, {{"a", 0, 3}, {"b", 5, 3}}));
  std::vector<float> p(8, 1.0f), g(8, 1.0f);
  ASSERT_OK(opt->Step(0, p.data(), g.data()));
  EXPECT_EQ(p[3], 1.0f);
  EXPECT_EQ(p[4], 1.0f);
  EXPECT_LT(p[0], 1.0f);
  EXPECT_LT(p[7], 1.0f);
  EXPECT_EQ(opt->state_bytes(0), 6 * 8);
}

// Each bucket counts its own steps: bias correction of one bucket does not
// depend on how often others were stepped, and buckets step concurrently.
TEST(ShardOptimizerTest, BucketsStepIndependentlyAndConcurrently) {
  ASSERT_OK_AND_ASSIGN(auto opt, ShardOptimizer::Create(Adam()));
  constexpr int kBuckets = 4;
  constexpr int kNumel = 1000;
  std::vector<std::vector<float>> params(kBuckets);
  std::vector<float> grad(kNumel);
  for (int i = 0; i < kNumel; ++i) grad[i] = std::sin(0.1f * i);
  for (int b = 0; b < kBuckets; ++b) {
    ASSERT_OK(opt->AddBucket(b, {{absl::StrCat("p", b), 0, kNumel}}));
    params[b].assign(kNumel, 0.5f);
  }
  // Bucket b is stepped b + 1 times, each bucket on its own thread.
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kBuckets);
  for (int b = 0; b < kBuckets; ++b) {
    threads.emplace_back([&, b] {
      for (int s = 0; s <= b; ++s) {
        absl::Status st = opt->Step(b, params[b].data(), grad.data());
        if (!st.ok()) results[b] = st;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& st : results) EXPECT_OK(st);

  // A fresh optimizer stepping one bucket 3 times must match bucket 2.
  ASSERT_OK_AND_ASSIGN(auto fresh, ShardOptimizer::Create(Adam()));
  ASSERT_OK(fresh->AddBucket(0, {{"p2", 0, kNumel}}));
  std::vector<float> p(kNumel, 0.5f);
  for (int s = 0; s < 3; ++s) ASSERT_OK(fresh->Step(0, p.data(), grad.data()));
  EXPECT_EQ(p, params[2]);
  EXPECT_NE(params[1], params[2]);
}

// Splitting a bucket over threads gives the same bits as one thread, for
// every kind, with groups, gaps and state-less spans in the bucket.
TEST(ShardOptimizerTest, ThreadedStepsAreBitIdentical) {
  const char* kSpecs[] = {
      R"({"kind":"SGD","hyperParameters":{"lr":0.1,"momentum":0.9},)"
      R"("paramGroups":[{"params":["*.bias"],"hyperParameters":{"momentum":0}}]})",
      R"({"kind":"ADAM","hyperParameters":{"weightDecay":0.1},)"
      R"("paramGroups":[{"params":["*.bias"],"hyperParameters":{"lr":0.01}}]})",
      R"({"kind":"ADAMW","paramGroups":[{"params":["a.*"],"hyperParameters":{"lr":0.01}}]})",
      R"({"kind":"ADAM","hyperParameters":{"amsgrad":true},)"
      R"("paramGroups":[{"params":["*.bias"],"hyperParameters":{"amsgrad":false}}]})",
      R"({"kind":"ADAGRAD","hyperParameters":{"lrDecay":0.1,"initialAccumulatorValue":0.2}})",
      R"({"kind":"RMSPROP","hyperParameters":{"momentum":0.9,"centered":true},)"
      R"("paramGroups":[{"params":["*.bias"],"hyperParameters":{"momentum":0}}]})",
      R"({"kind":"LION","hyperParameters":{"weightDecay":0.1}})",
  };
  const std::vector<ParamSpan> spans = {
      {"a.weight", 0, 1000}, {"a.bias", 1000, 37}, {"b.weight", 1040, 2001},
      {"b.bias", 3041, 3}, {"c.weight", 3050, 999}};
  const int64_t numel = 4049;
  std::vector<float> grad(numel);
  for (int64_t i = 0; i < numel; ++i) grad[i] = std::cos(0.37f * i);
  for (const char* json : kSpecs) {
    SCOPED_TRACE(json);
    const v1::OptimizerSpec spec = ParseOptimizer(json);
    ASSERT_OK_AND_ASSIGN(auto serial, ShardOptimizer::Create(spec));
    CpuOptimizerOptions options;
    options.num_threads = 3;
    options.min_elements_per_thread = 100;
    ASSERT_OK_AND_ASSIGN(auto threaded, ShardOptimizer::Create(spec, options));
    options.num_threads = 16;  // more threads than the bucket allows
    options.min_elements_per_thread = 1;
    ASSERT_OK_AND_ASSIGN(auto many, ShardOptimizer::Create(spec, options));
    for (auto* opt : {serial.get(), threaded.get(), many.get()}) {
      ASSERT_OK(opt->AddBucket(0, spans));
    }
    std::vector<float> p1(numel), p2, p3;
    for (int64_t i = 0; i < numel; ++i) p1[i] = std::sin(0.1f * i);
    p2 = p3 = p1;
    for (int s = 0; s < 3; ++s) {
      ASSERT_OK(serial->Step(0, p1.data(), grad.data()));
      ASSERT_OK(threaded->Step(0, p2.data(), grad.data()));
      ASSERT_OK(many->Step(0, p3.data(), grad.data()));
    }
    ASSERT_EQ(std::memcmp(p1.data(), p2.data(), numel * 4), 0);
    ASSERT_EQ(std::memcmp(p1.data(), p3.data(), numel * 4), 0);
    // The gaps stayed as they were.
    EXPECT_EQ(p1[1037], std::sin(0.1f * 1037));
    EXPECT_EQ(p1[3045], std::sin(0.1f * 3045));
  }
}

TEST(ShardOptimizerTest, RejectsBadCpuOptions) {
  CpuOptimizerOptions options;
  options.num_threads = 0;
  EXPECT_THAT(ShardOptimizer::Create(Adam(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_threads")));
  options.num_threads = 2;
  options.min_elements_per_thread = 0;
  EXPECT_THAT(ShardOptimizer::Create(Adam(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("min_elements_per_thread")));
}

}  // namespace
}  // namespace pshard::worker
