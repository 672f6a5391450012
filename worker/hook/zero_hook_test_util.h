// Helpers shared by the hook's unit tests (zero_hook_test.cc) and its
// HookMemory contract test (hook_memory_contract_test.cc): a small hook over
// two parameters with plain SGD, and an assignment that gives rank 0 every
// bucket.
#ifndef PSHARD_WORKER_HOOK_ZERO_HOOK_TEST_UTIL_H_
#define PSHARD_WORKER_HOOK_ZERO_HOOK_TEST_UTIL_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"

namespace pshard::worker {

// Plain SGD with lr 0.5: p -= g / 2.
inline absl::StatusOr<std::unique_ptr<ShardOptimizer>> Sgd() {
  v1::OptimizerSpec opt;
  opt.set_kind(v1::OptimizerSpec::SGD);
  opt.mutable_hyper_parameters()->set_lr(0.5);
  return ShardOptimizer::Create(opt);
}

// Parameters "a" (4 elements) and "b" (2) in one hook with a 5 s timeout.
inline absl::StatusOr<std::unique_ptr<ZeroHook>> SimpleHook(
    Communicator* comm, AssignmentProvider p) {
  auto optimizer = Sgd();
  if (!optimizer.ok()) return optimizer.status();
  std::vector<ParameterInfo> params = {{"a", {4}, 4}, {"b", {2}, 2}};
  ZeroHookOptions options;
  options.timeout = absl::Seconds(5);
  return ZeroHook::Create(params, comm, *std::move(optimizer), std::move(p),
                          options);
}

inline AssignmentProvider AllToRankZero() {
  return [](const BucketLayout& layout) -> absl::StatusOr<BucketAssignment> {
    return BucketAssignment{1, std::vector<int>(layout.num_buckets(), 0)};
  };
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_ZERO_HOOK_TEST_UTIL_H_
