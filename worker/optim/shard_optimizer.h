// ShardOptimizer: the optimizer state and step for the buckets this rank owns.
//
// State (SGD momentum, Adam's first and second moments) is allocated only for
// buckets added with AddBucket, so a rank holds about 1/world of the total.
// Arithmetic follows PyTorch's single-tensor ("foreach=False") SGD, Adam and
// AdamW, in the same operation order and in fp32, so that the same gradients
// give the same parameters.
#ifndef PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_
#define PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {

// Where one parameter sits inside a flat bucket.
struct ParamSpan {
  std::string name;
  int64_t offset = 0;  // in elements, from the start of the bucket
  int64_t numel = 0;
};

class ShardOptimizer {
 public:
  // `spec` must be valid (ValidateJobSpec); hyper-parameters are resolved per
  // parameter name with ResolveHyperParameters (common/job_spec.h).
  static absl::StatusOr<std::unique_ptr<ShardOptimizer>> Create(
      const v1::OptimizerSpec& spec);

  virtual ~ShardOptimizer() = default;

  // Takes ownership of bucket `bucket_index` (fp32, `spans` laid out inside
  // it) and allocates its zeroed state. InvalidArgument if spans overlap or
  // the bucket was already added.
  virtual absl::Status AddBucket(int bucket_index,
                                 std::vector<ParamSpan> spans) = 0;

  // One optimizer step on an owned bucket: updates `params` in place from
  // `grads` (already averaged over ranks). Each bucket counts its own steps
  // (Adam's bias correction). NotFound if the bucket is not owned.
  virtual absl::Status Step(int bucket_index, float* params,
                            const float* grads) = 0;

  // Bytes of optimizer state held for one bucket (0 if not owned) and in all.
  virtual int64_t state_bytes(int bucket_index) const = 0;
  virtual int64_t total_state_bytes() const = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_
