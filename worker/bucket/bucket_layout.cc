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

// A zeroed, 64-byte aligned buffer of `numel` elements of `element_bytes`,
// or null when the memory is not there.
std::unique_ptr<void, BucketStorage::FreeDeleter> AllocateZeroed(
    int64_t numel, int64_t element_bytes) {
  const int64_t elems = std::max<int64_t>(numel, 1);
  if (elems > static_cast<int64_t>(SIZE_MAX / element_bytes - 64)) {
    return nullptr;
  }
  size_t bytes = static_cast<size_t>(elems * element_bytes);
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, bytes);
  return std::unique_ptr<void, BucketStorage::FreeDeleter>(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BucketStorage>> BucketStorage::Create(
    const BucketLayout& layout, DataType param_dtype, DataType grad_dtype) {
  std::unique_ptr<BucketStorage> storage(new BucketStorage());
  storage->param_dtype_ = param_dtype;
  storage->grad_dtype_ = grad_dtype;
  const int n = static_cast<int>(layout.ready_order().size());
  storage->param_views_.assign(n, nullptr);
  storage->grad_views_.assign(n, nullptr);
  const int64_t param_size = DataTypeSize(param_dtype);
  const int64_t grad_size = DataTypeSize(grad_dtype);
  for (const Bucket& b : layout.buckets()) {
    auto params = AllocateZeroed(b.numel, param_size);
    auto grads = params == nullptr ? nullptr : AllocateZeroed(b.numel, grad_size);
    if (grads == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate bucket ", b.index, ": ", b.numel,
          " parameters and gradients (", b.numel * (param_size + grad_size),
          " bytes) of host memory"));
    }
    for (const BucketEntry& e : b.entries) {
      storage->param_views_[e.param_index] =
          AdvanceElements(params.get(), e.offset, param_dtype);
      storage->grad_views_[e.param_index] =
          AdvanceElements(grads.get(), e.offset, grad_dtype);
    }
    storage->params_.push_back(std::move(params));
    storage->grads_.push_back(std::move(grads));
  }
  return storage;
}

}  // namespace pshard::worker
