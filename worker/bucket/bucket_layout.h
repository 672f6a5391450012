// BucketLayout: how a model's parameters are packed into flat gradient
// buckets of one dtype, as DDP does: in gradient-ready order (so bucket 0 holds the
// parameters whose gradients are ready first, i.e. the last layers), each
// bucket about `cap_bytes`; a parameter larger than the cap gets a bucket of
// its own. BucketStorage holds the packed parameters and gradients: each
// parameter and its gradient are views into their bucket's flat buffers, so
// collectives and the optimizer work on whole buckets without copies.
#ifndef PSHARD_WORKER_BUCKET_BUCKET_LAYOUT_H_
#define PSHARD_WORKER_BUCKET_BUCKET_LAYOUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/comm/communicator.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

// One parameter inside a bucket.
struct BucketEntry {
  int param_index = 0;   // in the model's (registration) order
  int64_t offset = 0;    // elements from the start of the bucket
  int64_t numel = 0;
};

struct Bucket {
  int index = 0;
  int64_t numel = 0;
  std::vector<BucketEntry> entries;  // in ready order
};

class BucketLayout {
 public:
  // Packs `params` in `ready_order` (a permutation of their indices) into
  // buckets of at most `cap_bytes` of `dtype` (the parameters' dtype),
  // except that a parameter larger than the cap gets a bucket of its own.
  // InvalidArgument if ready_order is not a permutation, a parameter is
  // empty, or cap_bytes < 1.
  static absl::StatusOr<BucketLayout> Build(
      const std::vector<ParameterInfo>& params,
      absl::Span<const int> ready_order, int64_t cap_bytes,
      DataType dtype = DataType::kFloat32);

  // The order DDP assumes before it has observed a backward pass: reverse
  // registration order.
  static std::vector<int> DefaultReadyOrder(int num_params);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const std::vector<int>& ready_order() const { return ready_order_; }
  int bucket_of(int param_index) const { return bucket_of_[param_index]; }
  int64_t offset_of(int param_index) const { return offset_of_[param_index]; }
  int64_t total_numel() const;

  // The dtype of every parameter in these buckets, and its safetensors
  // name ("F32", "BF16"), as the layout reports carry it.
  DataType dtype() const { return dtype_; }
  const char* dtype_name() const;

  // Bytes of each bucket, by the shard package's rule for the dtype.
  std::vector<int64_t> BucketBytes() const;

  // What the optimizer needs to know about bucket `b`.
  std::vector<ParamSpan> Spans(int b) const;

  // The layout as reported to the coordinator (ReportBuckets).
  std::vector<v1::BucketLayout> ToProto() const;

  friend bool operator==(const BucketLayout& a, const BucketLayout& b) {
    return a.ready_order_ == b.ready_order_ && a.cap_bytes_ == b.cap_bytes_ &&
           a.dtype_ == b.dtype_ && a.bucket_of_ == b.bucket_of_;
  }

 private:
  std::vector<std::string> names_;
  std::vector<int> ready_order_;
  int64_t cap_bytes_ = 0;
  DataType dtype_ = DataType::kFloat32;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  std::vector<int64_t> offset_of_;
};

// The flat buffers of a layout: per bucket, 64-byte aligned parameters (of
// `param_dtype`) and gradients (of `grad_dtype`), zeroed. Each dtype's
// buckets lie in one arena, sized for any layout of the same parameters, so
// that Rearrange re-packs in place: memory once handed out (a view a
// program still holds from before the first step's re-pack) stays
// allocated until the storage goes, holding other values afterwards but
// never freed under the program.
class BucketStorage {
 public:
  // Allocates the buffers of `layout`. ResourceExhausted, naming the sizes,
  // when the memory is not there (what HookMemory::Arrange promises its
  // callers; an allocation failure is not a crash).
  static absl::StatusOr<std::unique_ptr<BucketStorage>> Create(
      const BucketLayout& layout, DataType param_dtype = DataType::kFloat32,
      DataType grad_dtype = DataType::kFloat32);

  // Lays the same parameters out as `layout`, in the same arenas: every
  // parameter keeps its values and gradient, the views move. A temporary
  // copy of the parameters and gradients is made (ResourceExhausted when
  // the memory is not there; nothing has changed then). InvalidArgument: a
  // layout of other parameters.
  absl::Status Rearrange(const BucketLayout& layout);

  DataType param_dtype() const { return param_dtype_; }
  DataType grad_dtype() const { return grad_dtype_; }

  void* bucket_params(int b) { return bucket_params_[b]; }
  void* bucket_grads(int b) { return bucket_grads_[b]; }

  // Views of parameter i (its values and its gradient) inside its bucket.
  void* param(int i) { return param_views_[i]; }
  void* grad(int i) { return grad_views_[i]; }
  const std::vector<void*>& param_views() const { return param_views_; }
  const std::vector<void*>& grad_views() const { return grad_views_; }

  // Frees a buffer from aligned_alloc.
  struct FreeDeleter {
    void operator()(void* p) const;
  };

 private:
  BucketStorage() = default;
  // Points the buckets and views into the arenas as `layout` packs them.
  void Place(const BucketLayout& layout);

  DataType param_dtype_ = DataType::kFloat32;
  DataType grad_dtype_ = DataType::kFloat32;
  std::vector<int64_t> numels_;  // per parameter, as Create's layout had it
  int64_t param_arena_bytes_ = 0;
  int64_t grad_arena_bytes_ = 0;
  std::unique_ptr<void, FreeDeleter> param_arena_;
  std::unique_ptr<void, FreeDeleter> grad_arena_;
  std::vector<void*> bucket_params_;
  std::vector<void*> bucket_grads_;
  std::vector<void*> param_views_;
  std::vector<void*> grad_views_;
};

// `p` advanced by `elements` elements of `dtype`.
inline void* AdvanceElements(void* p, int64_t elements, DataType dtype) {
  return static_cast<char*>(p) + elements * DataTypeSize(dtype);
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_BUCKET_BUCKET_LAYOUT_H_
