#include "worker/bucket/bucket_layout.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "shard/layout.h"

namespace pshard::worker {

absl::StatusOr<BucketLayout> BucketLayout::Build(
    const std::vector<ParameterInfo>& params,
    absl::Span<const int> ready_order, int64_t cap_bytes, DataType dtype) {
  const int n = static_cast<int>(params.size());
  if (cap_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket cap must be at least 1 byte, got ", cap_bytes));
  }
  if (static_cast<int>(ready_order.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient-ready order has ", ready_order.size(),
                     " entries for ", n, " parameters"));
  }
  BucketLayout layout;
  layout.cap_bytes_ = cap_bytes;
  layout.dtype_ = dtype;
  layout.ready_order_.assign(ready_order.begin(), ready_order.end());
  layout.bucket_of_.assign(n, -1);
  layout.offset_of_.assign(n, -1);
  for (const auto& p : params) layout.names_.push_back(p.name);
  const int64_t cap_elems =
      std::max<int64_t>(1, cap_bytes / DataTypeSize(dtype));
  for (int i : ready_order) {
    if (i < 0 || i >= n || layout.bucket_of_[i] != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient-ready order is not a permutation of the ", n,
          " parameters (parameter ", i, " repeated or out of range)"));
    }
    const int64_t numel = params[i].numel;
    if (numel < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter \"", params[i].name, "\" is empty"));
    }
    if (layout.buckets_.empty() ||
        (layout.buckets_.back().numel > 0 &&
         layout.buckets_.back().numel + numel > cap_elems)) {
      Bucket bucket;
      bucket.index = static_cast<int>(layout.buckets_.size());
      layout.buckets_.push_back(bucket);
    }
    Bucket& bucket = layout.buckets_.back();
    layout.bucket_of_[i] = bucket.index;
    layout.offset_of_[i] = bucket.numel;
    bucket.entries.push_back(BucketEntry{i, bucket.numel, numel});
    bucket.numel += numel;
  }
  return layout;
}

std::vector<int> BucketLayout::DefaultReadyOrder(int num_params) {
  std::vector<int> order(num_params);
  for (int i = 0; i < num_params; ++i) order[i] = num_params - 1 - i;
  return order;
}

int64_t BucketLayout::total_numel() const {
  int64_t total = 0;
  for (const auto& b : buckets_) total += b.numel;
  return total;
}

const char* BucketLayout::dtype_name() const {
  return dtype_ == DataType::kFloat32 ? "F32" : "BF16";
}

std::vector<int64_t> BucketLayout::BucketBytes() const {
  std::vector<int64_t> bytes;
  const int64_t element_bytes = shard::DtypeSize(dtype_name());
  for (const auto& b : buckets_) bytes.push_back(b.numel * element_bytes);
  return bytes;
}

std::vector<ParamSpan> BucketLayout::Spans(int b) const {
  std::vector<ParamSpan> spans;
  for (const auto& e : buckets_[b].entries) {
    spans.push_back(ParamSpan{names_[e.param_index], e.offset, e.numel});
  }
  return spans;
}

std::vector<v1::BucketLayout> BucketLayout::ToProto() const {
  std::vector<v1::BucketLayout> out;
  for (const auto& b : buckets_) {
    v1::BucketLayout proto;
    proto.set_index(b.index);
    for (const auto& e : b.entries) {
      v1::BucketParameter* p = proto.add_parameters();
      p->set_name(names_[e.param_index]);
      p->set_num_elements(e.numel);
      p->set_dtype(dtype_name());
    }
    out.push_back(std::move(proto));
  }
  return out;
}

void BucketStorage::FreeDeleter::operator()(void* p) const { std::free(p); }

namespace {

constexpr int64_t kBucketAlignment = 64;

int64_t RoundUpToAlignment(int64_t bytes) {
  return (bytes + kBucketAlignment - 1) / kBucketAlignment * kBucketAlignment;
}

// Bytes of an arena that holds any layout of parameters of `total` elements
// of `element_bytes` in all, `count` of them: each bucket holds at least one
// parameter and rounds up by less than the alignment (an empty bucket takes
// one element's room). -1 when that does not fit in an int64_t.
int64_t ArenaBytes(int64_t total, int64_t count, int64_t element_bytes) {
  const int64_t slack = (count + 1) * kBucketAlignment;
  if (total > (INT64_MAX - slack) / element_bytes) return -1;
  return RoundUpToAlignment(total * element_bytes + slack);
}

// A zeroed, 64-byte aligned buffer of `bytes`, or null when the memory is
// not there.
std::unique_ptr<void, BucketStorage::FreeDeleter> AllocateZeroed(
    int64_t bytes) {
  if (bytes < 0 || bytes > INT64_MAX - kBucketAlignment ||
      static_cast<uint64_t>(bytes) > SIZE_MAX - kBucketAlignment) {
    return nullptr;
  }
  // aligned_alloc takes a multiple of the alignment, and at least one.
  const size_t size = static_cast<size_t>(
      RoundUpToAlignment(std::max<int64_t>(bytes, 1)));
  void* p = std::aligned_alloc(kBucketAlignment, size);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, size);
  return std::unique_ptr<void, BucketStorage::FreeDeleter>(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BucketStorage>> BucketStorage::Create(
    const BucketLayout& layout, DataType param_dtype, DataType grad_dtype) {
  std::unique_ptr<BucketStorage> storage(new BucketStorage());
  storage->param_dtype_ = param_dtype;
  storage->grad_dtype_ = grad_dtype;
  const int n = static_cast<int>(layout.ready_order().size());
  storage->numels_.assign(n, 0);
  for (const Bucket& b : layout.buckets()) {
    for (const BucketEntry& e : b.entries) {
      storage->numels_[e.param_index] = e.numel;
    }
  }
  const int64_t total = layout.total_numel();
  storage->param_arena_bytes_ =
      ArenaBytes(total, n, DataTypeSize(param_dtype));
  storage->grad_arena_bytes_ = ArenaBytes(total, n, DataTypeSize(grad_dtype));
  storage->param_arena_ = AllocateZeroed(storage->param_arena_bytes_);
  if (storage->param_arena_ != nullptr) {
    storage->grad_arena_ = AllocateZeroed(storage->grad_arena_bytes_);
  }
  if (storage->grad_arena_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the buckets: ", layout.num_buckets(), " bucket(s) of ",
        total, " parameters and gradients (",
        total * (DataTypeSize(param_dtype) + DataTypeSize(grad_dtype)),
        " bytes) of host memory"));
  }
  storage->Place(layout);
  return storage;
}

void BucketStorage::Place(const BucketLayout& layout) {
  const int n = static_cast<int>(numels_.size());
  param_views_.assign(n, nullptr);
  grad_views_.assign(n, nullptr);
  bucket_params_.clear();
  bucket_grads_.clear();
  char* params = static_cast<char*>(param_arena_.get());
  char* grads = static_cast<char*>(grad_arena_.get());
  const int64_t param_size = DataTypeSize(param_dtype_);
  const int64_t grad_size = DataTypeSize(grad_dtype_);
  for (const Bucket& b : layout.buckets()) {
    bucket_params_.push_back(params);
    bucket_grads_.push_back(grads);
    for (const BucketEntry& e : b.entries) {
      param_views_[e.param_index] = AdvanceElements(params, e.offset,
                                                    param_dtype_);
      grad_views_[e.param_index] = AdvanceElements(grads, e.offset,
                                                   grad_dtype_);
    }
    const int64_t elements = std::max<int64_t>(b.numel, 1);
    params += RoundUpToAlignment(elements * param_size);
    grads += RoundUpToAlignment(elements * grad_size);
  }
}

absl::Status BucketStorage::Rearrange(const BucketLayout& layout) {
  const int n = static_cast<int>(numels_.size());
  bool same = static_cast<int>(layout.ready_order().size()) == n;
  for (const Bucket& b : layout.buckets()) {
    for (const BucketEntry& e : b.entries) {
      same = same && e.param_index >= 0 && e.param_index < n &&
             numels_[e.param_index] == e.numel;
    }
  }
  if (!same) {
    return absl::InvalidArgumentError(
        "a re-pack must lay out the same parameters (count and sizes) as "
        "the storage holds");
  }
  // Every parameter's values and gradient, by index, while the arenas are
  // laid out anew.
  const int64_t param_size = DataTypeSize(param_dtype_);
  const int64_t grad_size = DataTypeSize(grad_dtype_);
  const int64_t total = std::accumulate(numels_.begin(), numels_.end(),
                                        int64_t{0});
  auto saved = AllocateZeroed(total * (param_size + grad_size));
  if (saved == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot re-pack the buckets: no room for a copy of ", total,
        " parameters and gradients (", total * (param_size + grad_size),
        " bytes) of host memory"));
  }
  char* out = static_cast<char*>(saved.get());
  for (int i = 0; i < n; ++i) {
    std::memcpy(out, param_views_[i], numels_[i] * param_size);
    out += numels_[i] * param_size;
    std::memcpy(out, grad_views_[i], numels_[i] * grad_size);
    out += numels_[i] * grad_size;
  }
  std::memset(param_arena_.get(), 0, static_cast<size_t>(param_arena_bytes_));
  std::memset(grad_arena_.get(), 0, static_cast<size_t>(grad_arena_bytes_));
  Place(layout);
  const char* in = static_cast<const char*>(saved.get());
  for (int i = 0; i < n; ++i) {
    std::memcpy(param_views_[i], in, numels_[i] * param_size);
    in += numels_[i] * param_size;
    std::memcpy(grad_views_[i], in, numels_[i] * grad_size);
    in += numels_[i] * grad_size;
  }
  return absl::OkStatus();
}

}  // namespace pshard::worker
