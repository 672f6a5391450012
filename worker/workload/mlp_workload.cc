#include "worker/workload/mlp_workload.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/workload/random.h"

namespace pshard::worker {
namespace {

// Purpose tags of the random streams (see random.h). worker/gpu's mlp draws
// the same streams with the same tags: change them together.
constexpr uint64_t kTagStudentInit = 0x6d6c702d696e6974ULL;  // "mlp-init"
constexpr uint64_t kTagTeacher = 0x6d6c702d74636872ULL;      // "mlp-tchr"
constexpr uint64_t kTagData = 0x6d6c702d64617461ULL;         // "mlp-data"

// Largest buffer (elements) the workload allocates: far above any sensible
// model, low enough that a typo cannot ask for terabytes.
constexpr int64_t kMaxBufferElements = int64_t{1} << 33;

// y[batch, out] = x[batch, in] * w[out, in]^T + b[out].
void LinearForward(const float* x, const float* w, const float* b, int batch,
                   int in, int out, float* y) {
  for (int r = 0; r < batch; ++r) std::copy(b, b + out, y + int64_t{r} * out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x,
              in, w, in, 1.0f, y, out);
}

void Relu(const float* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void FillUniform(uint64_t key, float bound, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = UniformAt(key, i, -bound, bound);
}

// Weight [out, in] and bias [out] per layer, named as nn.Sequential names
// them: Linear at even indices, ReLU at odd ones.
std::vector<ParameterInfo> LayerParameters(const std::vector<int>& dims) {
  std::vector<ParameterInfo> params;
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const int in = dims[l], out = dims[l + 1];
    const std::string prefix = absl::StrCat("layers.", 2 * l, ".");
    params.push_back({prefix + "weight", {out, in}, int64_t{out} * in});
    params.push_back({prefix + "bias", {out}, out});
  }
  return params;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MlpWorkload>> MlpWorkload::Create(
    const v1::MlpWorkload& spec, uint64_t seed, int rank) {
  std::vector<int> dims;
  dims.push_back(spec.input_dim());
  for (int h : spec.hidden_dims()) dims.push_back(h);
  dims.push_back(spec.output_dim());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mlp: layer width ", i, " must be >= 1, got ", dims[i]));
    }
  }
  if (spec.batch_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp: batch_size must be >= 1, got ", spec.batch_size()));
  }
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const int64_t weight = int64_t{dims[l]} * dims[l + 1];
    const int64_t activation = int64_t{spec.batch_size()} * dims[l + 1];
    if (weight > kMaxBufferElements || activation > kMaxBufferElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mlp: layer ", l, " (", dims[l], " -> ", dims[l + 1],
          ", batch ", spec.batch_size(), ") is too large"));
    }
  }
  return std::unique_ptr<MlpWorkload>(
      new MlpWorkload(std::move(dims), spec.batch_size(), seed, rank));
}

MlpWorkload::MlpWorkload(std::vector<int> dims, int batch, uint64_t seed,
                         int rank)
    : FixedParametersWorkload("mlp", LayerParameters(dims)),
      dims_(std::move(dims)),
      batch_(batch),
      seed_(seed),
      rank_(rank) {
  const int layers = static_cast<int>(dims_.size()) - 1;
  int max_width = 0;
  for (int d : dims_) max_width = std::max(max_width, d);
  for (int l = 0; l < layers; ++l) {
    const int in = dims_[l], out = dims_[l + 1];
    // Teacher: Kaiming-uniform for ReLU, so signals keep unit-order scale.
    const float bound = std::sqrt(6.0f / static_cast<float>(in));
    std::vector<float> w(int64_t{out} * in), b(out);
    FillUniform(StreamKey(seed_, {kTagTeacher, uint64_t(l), 0}), bound,
                w.data(), w.size());
    FillUniform(StreamKey(seed_, {kTagTeacher, uint64_t(l), 1}), bound,
                b.data(), b.size());
    teacher_.push_back(std::move(w));
    teacher_.push_back(std::move(b));

    act_.emplace_back(int64_t{batch_} * in);
    pre_.emplace_back(int64_t{batch_} * out);
  }
  target_.resize(int64_t{batch_} * dims_.back());
  for (auto& buffer : teacher_act_) buffer.resize(int64_t{batch_} * max_width);
  delta_.resize(int64_t{batch_} * max_width);
  delta_prev_.resize(int64_t{batch_} * max_width);
}

absl::Status MlpWorkload::InitializeParameters(
    absl::Span<float* const> params) {
  RETURN_IF_ERROR(CheckBuffers(params.size()));
  for (size_t i = 0; i < parameters().size(); ++i) {
    const int layer = static_cast<int>(i / 2);
    // nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both.
    const float bound = 1.0f / std::sqrt(static_cast<float>(dims_[layer]));
    FillUniform(StreamKey(seed_, {kTagStudentInit, uint64_t(layer), i % 2}),
                bound, params[i], parameters()[i].numel);
  }
  return absl::OkStatus();
}

void MlpWorkload::BatchInputs(int64_t step, float* x) const {
  FillNormal(StreamKey(seed_, {kTagData, uint64_t(rank_), uint64_t(step)}), x,
             int64_t{batch_} * dims_[0]);
}

void MlpWorkload::MakeBatch(int64_t step) {
  BatchInputs(step, act_[0].data());

  const int layers = static_cast<int>(dims_.size()) - 1;
  const float* in = act_[0].data();
  for (int l = 0; l < layers; ++l) {
    float* out = l == layers - 1 ? target_.data() : teacher_act_[l % 2].data();
    LinearForward(in, teacher_[2 * l].data(), teacher_[2 * l + 1].data(),
                  batch_, dims_[l], dims_[l + 1], out);
    if (l < layers - 1) Relu(out, int64_t{batch_} * dims_[l + 1], out);
    in = out;
  }
}

absl::StatusOr<double> MlpWorkload::Forward(
    absl::Span<const float* const> params, GradientSink* sink) {
  const int layers = static_cast<int>(dims_.size()) - 1;
  for (int l = 0; l < layers; ++l) {
    if (sink != nullptr) {
      RETURN_IF_ERROR(sink->WaitForParameter(2 * l));
      RETURN_IF_ERROR(sink->WaitForParameter(2 * l + 1));
    }
    LinearForward(act_[l].data(), params[2 * l], params[2 * l + 1], batch_,
                  dims_[l], dims_[l + 1], pre_[l].data());
    if (l < layers - 1) {
      Relu(pre_[l].data(), pre_[l].size(), act_[l + 1].data());
    }
  }
  // MSE, mean over batch and outputs; dL/dout = 2 (out - y) / count.
  const std::vector<float>& out = pre_[layers - 1];
  const int64_t count = static_cast<int64_t>(out.size());
  const float scale = 2.0f / static_cast<float>(count);
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float diff = out[i] - target_[i];
    sum += static_cast<double>(diff) * diff;
    delta_[i] = scale * diff;
  }
  return sum / static_cast<double>(count);
}

absl::StatusOr<double> MlpWorkload::Loss(
    int64_t step, absl::Span<const float* const> params) {
  RETURN_IF_ERROR(CheckBuffers(params.size()));
  MakeBatch(step);
  return Forward(params);
}

absl::StatusOr<double> MlpWorkload::ComputeGradients(
    int64_t step, absl::Span<const float* const> params,
    absl::Span<float* const> grads, GradientSink& sink) {
  RETURN_IF_ERROR(CheckBuffers(params.size(), grads.size()));
  MakeBatch(step);
  ASSIGN_OR_RETURN(const double loss, Forward(params, &sink));

  // Backward, last layer first. delta_ holds dL/d(pre-activation) of layer l.
  // A layer's gradients are signalled only after the last read of its
  // weight (for the gradient of the layer below): the hook may step the
  // optimizer on them, and so rewrite the parameter, as soon as it hears.
  const int layers = static_cast<int>(dims_.size()) - 1;
  for (int l = layers - 1; l >= 0; --l) {
    const int in = dims_[l], out = dims_[l + 1];
    // Bias: column sums of delta.
    float* db = grads[2 * l + 1];
    std::fill(db, db + out, 0.0f);
    for (int r = 0; r < batch_; ++r) {
      const float* row = delta_.data() + int64_t{r} * out;
      for (int j = 0; j < out; ++j) db[j] += row[j];
    }
    // Weight: dW[out, in] = delta^T[out, batch] * act[batch, in].
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch_, 1.0f,
                delta_.data(), out, act_[l].data(), in, 0.0f, grads[2 * l], in);
    if (l > 0) {
      // dL/d(act[l]) = delta * W, then through the ReLU of layer l-1.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch_, in, out,
                  1.0f, delta_.data(), out, params[2 * l], in, 0.0f,
                  delta_prev_.data(), in);
      const float* pre = pre_[l - 1].data();
      const int64_t n = int64_t{batch_} * in;
      for (int64_t i = 0; i < n; ++i) {
        if (!(pre[i] > 0.0f)) delta_prev_[i] = 0.0f;
      }
    }
    sink.GradientReady(2 * l + 1);
    sink.GradientReady(2 * l);
    std::swap(delta_, delta_prev_);
  }
  return loss;
}

}  // namespace pshard::worker
