#include "examples/cpp_api/linear_regression.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/api/trainer.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"

namespace pshard::examples {
namespace {

using worker::Trainer;

constexpr int kIn = 16;
constexpr int kOut = 4;
constexpr int kBatch = 32;

// One rank's training loop: everything a user writes. The Trainer is
// handed out through `trainer_out` so that the caller can destroy the
// communicator first (see trainer.h).
absl::Status TrainRank(worker::Communicator* comm, int steps, bool verbose,
                       ExampleResult* result,
                       std::unique_ptr<Trainer>& trainer_out) {
  worker::TrainerOptions options;
  options.optimizer.set_kind(v1::OptimizerSpec::ADAM);
  options.optimizer.mutable_hyper_parameters()->set_lr(0.05);
  // Tiny buckets so that this tiny model still has one bucket per rank.
  options.bucket_cap_mb = 64.0 / (1024 * 1024);
  ASSIGN_OR_RETURN(
      trainer_out,
      Trainer::Create(comm,
                      {{"linear.weight", {kOut, kIn}, kOut * kIn},
                       {"linear.bias", {kOut}, kOut}},
                      options));
  Trainer* trainer = trainer_out.get();

  // Same initial parameters on every rank (same seed).
  std::mt19937 init(7);
  std::normal_distribution<float> normal(0, 0.1f);
  for (float& w : trainer->parameter(0)) w = normal(init);
  for (float& b : trainer->parameter(1)) b = 0;

  // A fixed teacher; each rank draws its own data.
  std::mt19937 teacher_rng(1);
  std::vector<float> teacher(kOut * kIn);
  for (float& t : teacher) t = normal(teacher_rng) * 10;
  std::mt19937 data(100 + comm->rank());

  for (int step = 1; step <= steps; ++step) {
    absl::Span<float> w = trainer->parameter(0);
    absl::Span<float> b = trainer->parameter(1);
    absl::Span<float> gw = trainer->gradient(0);
    absl::Span<float> gb = trainer->gradient(1);
    std::fill(gw.begin(), gw.end(), 0.0f);
    std::fill(gb.begin(), gb.end(), 0.0f);
    double loss = 0;
    std::vector<float> x(kIn), err(kOut);
    for (int n = 0; n < kBatch; ++n) {
      for (float& v : x) v = normal(data) * 10;
      for (int o = 0; o < kOut; ++o) {
        float y = 0, target = 0;
        for (int i = 0; i < kIn; ++i) {
          y += w[o * kIn + i] * x[i];
          target += teacher[o * kIn + i] * x[i];
        }
        y += b[o];
        err[o] = y - target;
        loss += err[o] * err[o];
      }
      // d(mean squared error)/d(params), accumulated over the batch.
      for (int o = 0; o < kOut; ++o) {
        const float g = 2 * err[o] / (kBatch * kOut);
        gb[o] += g;
        for (int i = 0; i < kIn; ++i) gw[o * kIn + i] += g * x[i];
      }
    }
    loss /= kBatch * kOut;
    // Backward order: the bias (last parameter) is final first.
    RETURN_IF_ERROR(trainer->GradientReady(1));
    RETURN_IF_ERROR(trainer->GradientReady(0));
    RETURN_IF_ERROR(trainer->FinishStep());
    if (comm->rank() == 0) {
      if (step == 1) result->initial_loss = loss;
      result->final_loss = loss;
      if (verbose && (step == 1 || step % 20 == 0)) {
        std::printf("step %4d  loss %.6f\n", step, loss);
      }
    }
  }
  // Every rank is done before anyone tears its connections down.
  RETURN_IF_ERROR(comm->Barrier()->Wait(absl::Seconds(30)));
  result->state_bytes[comm->rank()] = trainer->optimizer_state_bytes();
  result->owned_buckets[comm->rank()] =
      static_cast<int>(trainer->owned_buckets().size());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExampleResult> RunLinearRegression(int world_size, int steps,
                                                  bool verbose) {
  if (world_size < 1 || steps < 1) {
    return absl::InvalidArgumentError("world_size and steps must be >= 1");
  }
  ExampleResult result;
  result.state_bytes.assign(world_size, 0);
  result.owned_buckets.assign(world_size, 0);
  worker::InMemoryKvStore store;
  std::vector<absl::Status> statuses(world_size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.emplace_back([&, r] {
      worker::GlooOptions gloo;
      gloo.rank = r;
      gloo.world_size = world_size;
      gloo.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<worker::Communicator>> comm =
          worker::CreateGlooCommunicator(gloo, store);
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      // Destroyed after the communicator (declared first, so freed last).
      std::unique_ptr<Trainer> trainer;
      std::unique_ptr<worker::Communicator> communicator = *std::move(comm);
      statuses[r] =
          TrainRank(communicator.get(), steps, verbose, &result, trainer);
      communicator.reset();
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world_size; ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat("rank ", r, ": ", statuses[r].message()));
    }
  }
  return result;
}

}  // namespace pshard::examples
