// The C API: pshard.h's calls over Session, each status turned into a
// result code and the thread's last-error text at this one boundary.
#include "worker/api/pshard.h"

#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/shard.h"
#include "common/job_spec_json.h"
#include "google/protobuf/util/json_util.h"
#include "worker/api/session.h"

namespace {

using ::pshard::worker::Session;

// The range checks below are sound only if every int is a value of the enum.
template <typename Enum>
constexpr bool kEveryIntIsAValue =
    std::is_same_v<std::underlying_type_t<Enum>, int>;
static_assert(kEveryIntIsAValue<pshardResult_t> &&
              kEveryIntIsAValue<pshardDataType_t> &&
              kEveryIntIsAValue<pshardMemory_t> &&
              kEveryIntIsAValue<pshardCommMode_t>);

// Tells a live handle from a closed one or from garbage (best effort: a
// freed handle's memory may be reused).
constexpr uint64_t kLiveMagic = 0x7073686172645631;  // "pshardV1"

thread_local std::string last_error;
// pshardGetHyperParameters' last answer on this thread.
thread_local std::string hyper_parameters_json;

pshardResult_t ToResult(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return pshardSuccess;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return pshardInvalidArgument;
    case absl::StatusCode::kFailedPrecondition:
      return pshardInvalidUsage;
    case absl::StatusCode::kDeadlineExceeded:
      return pshardTimeout;
    case absl::StatusCode::kUnavailable:
      return pshardUnavailable;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return pshardAborted;
    case absl::StatusCode::kNotFound:
      return pshardNotFound;
    case absl::StatusCode::kDataLoss:
      return pshardDataLoss;
    default:
      return pshardInternalError;
  }
}

pshardResult_t Fail(pshardResult_t result, std::string message) {
  last_error = std::move(message);
  return result;
}

pshardResult_t Return(const absl::Status& status) {
  if (status.ok()) return pshardSuccess;
  return Fail(ToResult(status), std::string(status.message()));
}

// Runs `fn` with nothing escaping: an exception (none is expected; a
// bad_alloc is possible) becomes pshardInternalError.
template <typename Fn>
pshardResult_t Guarded(const char* call, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Fail(pshardInternalError, absl::StrCat(call, ": ", e.what()));
  } catch (...) {
    return Fail(pshardInternalError, absl::StrCat(call, ": unknown exception"));
  }
}

pshardResult_t NullArgument(const char* call, const char* argument) {
  return Fail(pshardInvalidArgument,
              absl::StrCat(call, ": ", argument, " is NULL"));
}

// pshardSuccess when `data` can hold `size` bytes of the caller's memory:
// size >= 0, and `data` (named `argument`) not NULL unless size is 0.
pshardResult_t CheckBytesArgument(const char* call, const void* data,
                                  int64_t size, const char* argument) {
  if (size < 0) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(call, ": size must be >= 0, got ", size));
  }
  if (data == nullptr && size > 0) return NullArgument(call, argument);
  return pshardSuccess;
}

}  // namespace

// The key of an entry that carries a parameter's step only (a parameter
// without optimizer state), as torch's state dicts name the step.
constexpr char kStepOnlyKey[] = "step";
// Its tensor index in pshardOptimizerState::entries.
constexpr size_t kStepOnly = ~size_t{0};

// A copy of a rank's optimizer state shard and its entries' flat index.
struct pshardOptimizerState {
  uint64_t magic = kLiveMagic;
  Session::OptimizerStateShard shard;
  // (parameter, tensor) of each entry; tensor kStepOnly for a parameter
  // without state.
  std::vector<std::pair<size_t, size_t>> entries;
};

struct pshardSession {
  uint64_t magic = kLiveMagic;
  absl::Mutex mu;
  std::unique_ptr<Session> session ABSL_GUARDED_BY(mu);
};

namespace {

// Checks the handle, then runs fn(Session&) under the handle's lock.
template <typename Fn>
pshardResult_t WithSession(const char* call, pshardSession_t handle, Fn&& fn) {
  if (handle == nullptr) return NullArgument(call, "session");
  if (handle->magic != kLiveMagic) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(call, ": session is not an open session"));
  }
  return Guarded(call, [&]() -> pshardResult_t {
    absl::MutexLock lock(&handle->mu);
    return fn(*handle->session);
  });
}

// Parameter or gradient `index`'s span, after Prepare.
pshardResult_t GetBuffer(const char* call, pshardSession_t handle, int index,
                         void** data, int64_t* numel, bool gradient) {
  if (data == nullptr) return NullArgument(call, "data");
  if (numel == nullptr) return NullArgument(call, "numel");
  return WithSession(call, handle, [&](Session& s) {
    // A failed session's too: the program may still read what it holds.
    if (absl::Status buffers = s.CheckHasBuffers(); !buffers.ok()) {
      return Return(buffers);
    }
    if (index < 0 || index >= s.num_parameters()) {
      return Fail(pshardInvalidArgument,
                  absl::StrCat(call, ": index ", index, " is not a parameter "
                               "index (", s.num_parameters(),
                               " registered)"));
    }
    *data = gradient ? s.gradient_data(index) : s.parameter_data(index);
    *numel = s.parameter_numel(index);
    return pshardSuccess;
  });
}

// pshardDataType_t ↔ the hook's DataType.
std::optional<pshard::worker::DataType> ToDataType(pshardDataType_t dtype) {
  switch (dtype) {
    case pshardFloat32:
      return pshard::worker::DataType::kFloat32;
    case pshardBFloat16:
      return pshard::worker::DataType::kBFloat16;
    default:
      return std::nullopt;
  }
}

pshardDataType_t FromDataType(pshard::worker::DataType dtype) {
  return dtype == pshard::worker::DataType::kBFloat16 ? pshardBFloat16
                                                      : pshardFloat32;
}

pshardResult_t NotADataType(const char* call, const char* argument,
                            pshardDataType_t dtype) {
  return Fail(pshardInvalidArgument,
              absl::StrCat(call, ": ", argument, " ", static_cast<int>(dtype),
                           " is not a pshardDataType_t (pshardFloat32 or "
                           "pshardBFloat16)"));
}

}  // namespace

extern "C" {

const char* pshardGetErrorString(pshardResult_t result) {
  switch (result) {
    case pshardSuccess:
      return "success";
    case pshardInvalidArgument:
      return "invalid argument";
    case pshardInvalidUsage:
      return "invalid usage (call out of order)";
    case pshardInternalError:
      return "internal error";
    case pshardTimeout:
      return "timeout";
    case pshardUnavailable:
      return "unavailable";
    case pshardAborted:
      return "aborted";
    case pshardNotFound:
      return "not found";
    case pshardDataLoss:
      return "data loss (a corrupted checkpoint)";
    default:
      return "unknown result code";
  }
}

const char* pshardGetLastError(void) { return last_error.c_str(); }

int pshardGetVersion(void) { return PSHARD_API_VERSION; }

pshardResult_t pshardSessionOpen(pshardSession_t* session) {
  if (session == nullptr) return NullArgument("pshardSessionOpen", "session");
  *session = nullptr;
  return Guarded("pshardSessionOpen", [&]() -> pshardResult_t {
    // The environment is read here, at the API's edge, and nowhere deeper.
    absl::StatusOr<pshard::worker::SessionEnvironment> env =
        pshard::worker::ParseSessionEnvironment(
            [](const char* name) { return std::getenv(name); });
    if (!env.ok()) return Return(env.status());
    absl::StatusOr<std::unique_ptr<Session>> opened = Session::Open(*env);
    if (!opened.ok()) return Return(opened.status());
    auto handle = std::make_unique<pshardSession>();
    {
      absl::MutexLock lock(&handle->mu);
      handle->session = std::move(*opened);
    }
    *session = handle.release();
    return pshardSuccess;
  });
}

pshardResult_t pshardSessionRank(pshardSession_t session, int* rank) {
  if (rank == nullptr) return NullArgument("pshardSessionRank", "rank");
  return WithSession("pshardSessionRank", session, [&](Session& s) {
    *rank = s.rank();
    return pshardSuccess;
  });
}

pshardResult_t pshardSessionWorldSize(pshardSession_t session, int* world) {
  if (world == nullptr) return NullArgument("pshardSessionWorldSize", "world");
  return WithSession("pshardSessionWorldSize", session, [&](Session& s) {
    *world = s.world_size();
    return pshardSuccess;
  });
}

pshardResult_t pshardSetOptimizer(pshardSession_t session, const char* json) {
  if (json == nullptr) return NullArgument("pshardSetOptimizer", "json");
  return WithSession("pshardSetOptimizer", session, [&](Session& s) {
    return Return(s.SetOptimizerJson(json));
  });
}

pshardResult_t pshardSetBucketCapMb(pshardSession_t session, double mb) {
  return WithSession("pshardSetBucketCapMb", session, [&](Session& s) {
    return Return(s.SetBucketCapMb(mb));
  });
}

pshardResult_t pshardSetCommMode(pshardSession_t session,
                                 pshardCommMode_t mode) {
  return WithSession("pshardSetCommMode", session, [&](Session& s) {
    switch (mode) {
      case pshardReduceBroadcast:
        return Return(s.SetCommMode(pshard::v1::JobSpec::REDUCE_BROADCAST));
      case pshardAllreduceBroadcast:
        return Return(s.SetCommMode(pshard::v1::JobSpec::ALLREDUCE_BROADCAST));
      default:
        return Fail(pshardInvalidArgument,
                    absl::StrCat("pshardSetCommMode: mode ",
                                 static_cast<int>(mode),
                                 " is not a pshardCommMode_t"));
    }
  });
}

pshardResult_t pshardSetOverlapParamBroadcast(pshardSession_t session,
                                              int enable) {
  constexpr char kCall[] = "pshardSetOverlapParamBroadcast";
  if (enable != 0 && enable != 1) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": enable must be 0 or 1, got ", enable));
  }
  return WithSession(kCall, session, [&](Session& s) {
    return Return(s.SetOverlapParamBroadcast(enable == 1));
  });
}

pshardResult_t pshardGetOverlapParamBroadcast(pshardSession_t session,
                                              int* enabled) {
  constexpr char kCall[] = "pshardGetOverlapParamBroadcast";
  if (enabled == nullptr) return NullArgument(kCall, "enabled");
  return WithSession(kCall, session, [&](Session& s) {
    *enabled = s.overlap_param_broadcast() ? 1 : 0;
    return pshardSuccess;
  });
}

pshardResult_t pshardSetPrecision(pshardSession_t session,
                                  pshardDataType_t param_dtype,
                                  pshardDataType_t reduce_dtype) {
  constexpr char kCall[] = "pshardSetPrecision";
  pshard::worker::MixedPrecision precision;
  const auto param = ToDataType(param_dtype);
  if (!param.has_value()) return NotADataType(kCall, "param_dtype", param_dtype);
  const auto reduce = ToDataType(reduce_dtype);
  if (!reduce.has_value()) {
    return NotADataType(kCall, "reduce_dtype", reduce_dtype);
  }
  precision.param_dtype = *param;
  precision.reduce_dtype = *reduce;
  return WithSession(kCall, session, [&](Session& s) {
    return Return(s.SetPrecision(precision));
  });
}

pshardResult_t pshardGetPrecision(pshardSession_t session,
                                  pshardDataType_t* param_dtype,
                                  pshardDataType_t* reduce_dtype) {
  constexpr char kCall[] = "pshardGetPrecision";
  if (param_dtype == nullptr) return NullArgument(kCall, "param_dtype");
  if (reduce_dtype == nullptr) return NullArgument(kCall, "reduce_dtype");
  return WithSession(kCall, session, [&](Session& s) {
    *param_dtype = FromDataType(s.precision().param_dtype);
    *reduce_dtype = FromDataType(s.precision().reduce_dtype);
    return pshardSuccess;
  });
}

pshardResult_t pshardSetCudaDevice(pshardSession_t session, int device,
                                   void* stream) {
  return WithSession("pshardSetCudaDevice", session, [&](Session& s) {
    pshard::worker::CudaPlacement placement;
    placement.device = device;
    placement.stream = static_cast<CUstream_st*>(stream);
    return Return(s.SetCudaPlacement(placement));
  });
}

pshardResult_t pshardRegisterParameter(pshardSession_t session,
                                       const char* name, int ndim,
                                       const int64_t* shape,
                                       pshardDataType_t dtype,
                                       pshardMemory_t memory, int* index) {
  constexpr char kCall[] = "pshardRegisterParameter";
  if (name == nullptr) return NullArgument(kCall, "name");
  if (index == nullptr) return NullArgument(kCall, "index");
  if (ndim < 0 || ndim > pshard::worker::kMaxParameterDims) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": ndim must be in [0, ",
                             pshard::worker::kMaxParameterDims, "], got ",
                             ndim));
  }
  if (ndim > 0 && shape == nullptr) return NullArgument(kCall, "shape");
  const std::optional<pshard::worker::DataType> data_type = ToDataType(dtype);
  if (!data_type.has_value()) return NotADataType(kCall, "dtype", dtype);
  if (memory != pshardHostMemory && memory != pshardCudaMemory) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": memory ", static_cast<int>(memory),
                             " is not a pshardMemory_t"));
  }
  return WithSession(kCall, session, [&](Session& s) {
    absl::StatusOr<int> i = s.RegisterParameter(
        name, std::vector<int64_t>(shape, shape + ndim), *data_type,
        memory == pshardCudaMemory ? pshard::worker::ParameterMemory::kCuda
                                   : pshard::worker::ParameterMemory::kHost);
    if (!i.ok()) return Return(i.status());
    *index = *i;
    return pshardSuccess;
  });
}

pshardResult_t pshardPrepare(pshardSession_t session) {
  return WithSession("pshardPrepare", session,
                     [&](Session& s) { return Return(s.Prepare()); });
}

pshardResult_t pshardNumParameters(pshardSession_t session, int* count) {
  if (count == nullptr) return NullArgument("pshardNumParameters", "count");
  return WithSession("pshardNumParameters", session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    *count = s.num_parameters();
    return pshardSuccess;
  });
}

pshardResult_t pshardGetParameter(pshardSession_t session, int index,
                                  void** data, int64_t* numel) {
  return GetBuffer("pshardGetParameter", session, index, data, numel,
                   /*gradient=*/false);
}

pshardResult_t pshardGetGradient(pshardSession_t session, int index,
                                 void** data, int64_t* numel) {
  return GetBuffer("pshardGetGradient", session, index, data, numel,
                   /*gradient=*/true);
}

pshardResult_t pshardSetParameterFromFloat32(pshardSession_t session,
                                             int index, const float* values,
                                             int64_t numel) {
  constexpr char kCall[] = "pshardSetParameterFromFloat32";
  if (values == nullptr) return NullArgument(kCall, "values");
  if (numel < 0) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": numel must be >= 0, got ", numel));
  }
  return WithSession(kCall, session, [&](Session& s) {
    return Return(s.SetParameterValues(
        index, absl::MakeConstSpan(values, static_cast<size_t>(numel))));
  });
}

pshardResult_t pshardGradientReady(pshardSession_t session, int index) {
  return WithSession("pshardGradientReady", session, [&](Session& s) {
    return Return(s.GradientReady(index));
  });
}

pshardResult_t pshardFinishStep(pshardSession_t session) {
  return WithSession("pshardFinishStep", session,
                     [&](Session& s) { return Return(s.FinishStep()); });
}

pshardResult_t pshardSetHyperParameters(pshardSession_t session, int group,
                                        const char* json) {
  if (json == nullptr) return NullArgument("pshardSetHyperParameters", "json");
  return WithSession("pshardSetHyperParameters", session, [&](Session& s) {
    pshard::v1::OptimizerHyperParameters changes;
    if (absl::Status parsed = pshard::ParseStrictJson(json, "", &changes);
        !parsed.ok()) {
      return Fail(pshardInvalidArgument,
                  absl::StrCat("pshardSetHyperParameters: ", parsed.message()));
    }
    return Return(s.SetHyperParameters(group, changes));
  });
}

pshardResult_t pshardGetHyperParameters(pshardSession_t session, int group,
                                        const char** json) {
  if (json == nullptr) return NullArgument("pshardGetHyperParameters", "json");
  return WithSession("pshardGetHyperParameters", session, [&](Session& s) {
    absl::StatusOr<pshard::v1::OptimizerHyperParameters> hp =
        s.GroupHyperParameters(group);
    if (!hp.ok()) return Return(hp.status());
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    std::string printed;
    if (const auto status =
            google::protobuf::util::MessageToJsonString(*hp, &printed, options);
        !status.ok()) {
      return Fail(
          pshardInternalError,
          absl::StrCat("pshardGetHyperParameters: ", status.ToString()));
    }
    hyper_parameters_json = std::move(printed);
    *json = hyper_parameters_json.c_str();
    return pshardSuccess;
  });
}

pshardResult_t pshardSetLearningRate(pshardSession_t session, int group,
                                     double lr) {
  return WithSession("pshardSetLearningRate", session, [&](Session& s) {
    pshard::v1::OptimizerHyperParameters changes;
    changes.set_lr(lr);
    return Return(s.SetHyperParameters(group, changes));
  });
}

pshardResult_t pshardGetLearningRate(pshardSession_t session, int group,
                                     double* lr) {
  if (lr == nullptr) return NullArgument("pshardGetLearningRate", "lr");
  return WithSession("pshardGetLearningRate", session, [&](Session& s) {
    absl::StatusOr<pshard::v1::OptimizerHyperParameters> hp =
        s.GroupHyperParameters(group);
    if (!hp.ok()) return Return(hp.status());
    *lr = hp->lr();
    return pshardSuccess;
  });
}

pshardResult_t pshardParameterGroup(pshardSession_t session, int index,
                                    int* group) {
  if (group == nullptr) return NullArgument("pshardParameterGroup", "group");
  return WithSession("pshardParameterGroup", session, [&](Session& s) {
    absl::StatusOr<int> found = s.ParameterGroup(index);
    if (!found.ok()) return Return(found.status());
    *group = *found;
    return pshardSuccess;
  });
}

pshardResult_t pshardStepsFinished(pshardSession_t session, int64_t* steps) {
  if (steps == nullptr) return NullArgument("pshardStepsFinished", "steps");
  return WithSession("pshardStepsFinished", session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    *steps = s.steps_finished();
    return pshardSuccess;
  });
}

pshardResult_t pshardLastGradNorm(pshardSession_t session, double* norm,
                                  int* known) {
  if (norm == nullptr) return NullArgument("pshardLastGradNorm", "norm");
  if (known == nullptr) return NullArgument("pshardLastGradNorm", "known");
  return WithSession("pshardLastGradNorm", session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    const std::optional<double> last = s.last_grad_norm();
    *known = last.has_value() ? 1 : 0;
    *norm = last.value_or(0);
    return pshardSuccess;
  });
}

pshardResult_t pshardAverageLoss(pshardSession_t session, double loss,
                                 double* mean) {
  if (mean == nullptr) return NullArgument("pshardAverageLoss", "mean");
  return WithSession("pshardAverageLoss", session, [&](Session& s) {
    absl::StatusOr<double> average = s.AverageLoss(loss);
    if (!average.ok()) return Return(average.status());
    *mean = *average;
    return pshardSuccess;
  });
}

pshardResult_t pshardBroadcast(pshardSession_t session, void* data,
                               int64_t size, int root) {
  constexpr char kCall[] = "pshardBroadcast";
  if (pshardResult_t checked = CheckBytesArgument(kCall, data, size, "data");
      checked != pshardSuccess) {
    return checked;
  }
  return WithSession(kCall, session, [&](Session& s) {
    return Return(s.Broadcast(
        root, absl::MakeSpan(static_cast<char*>(data),
                             static_cast<size_t>(size))));
  });
}

pshardResult_t pshardReportProgress(pshardSession_t session, int64_t step,
                                    double loss, int64_t samples) {
  return WithSession("pshardReportProgress", session, [&](Session& s) {
    return Return(s.ReportProgress(step, loss, samples));
  });
}

pshardResult_t pshardNumBuckets(pshardSession_t session, int* count) {
  if (count == nullptr) return NullArgument("pshardNumBuckets", "count");
  return WithSession("pshardNumBuckets", session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    *count = s.num_buckets();
    return pshardSuccess;
  });
}

pshardResult_t pshardOwnedBuckets(pshardSession_t session, int* owned,
                                  int capacity, int* count) {
  constexpr char kCall[] = "pshardOwnedBuckets";
  if (count == nullptr) return NullArgument(kCall, "count");
  if (capacity < 0) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": capacity must be >= 0, got ", capacity));
  }
  if (capacity > 0 && owned == nullptr) return NullArgument(kCall, "owned");
  return WithSession(kCall, session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    const std::vector<int> buckets = s.owned_buckets();
    *count = static_cast<int>(buckets.size());
    for (int i = 0; i < capacity && i < *count; ++i) owned[i] = buckets[i];
    return pshardSuccess;
  });
}

pshardResult_t pshardExportOptimizerState(pshardSession_t session,
                                          pshardOptimizerState_t* state) {
  constexpr char kCall[] = "pshardExportOptimizerState";
  if (state == nullptr) return NullArgument(kCall, "state");
  *state = nullptr;
  return WithSession(kCall, session, [&](Session& s) {
    absl::StatusOr<Session::OptimizerStateShard> shard =
        s.ExportOptimizerState();
    if (!shard.ok()) return Return(shard.status());
    auto copy = std::make_unique<pshardOptimizerState>();
    copy->shard = *std::move(shard);
    for (size_t p = 0; p < copy->shard.params.size(); ++p) {
      if (copy->shard.params[p].tensors.empty()) {
        copy->entries.emplace_back(p, kStepOnly);
      }
      for (size_t t = 0; t < copy->shard.params[p].tensors.size(); ++t) {
        copy->entries.emplace_back(p, t);
      }
    }
    *state = copy.release();
    return pshardSuccess;
  });
}

namespace {

pshardResult_t CheckState(const char* call, pshardOptimizerState_t state) {
  if (state == nullptr) return NullArgument(call, "state");
  if (state->magic != kLiveMagic) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(call, ": state is not a live optimizer state"));
  }
  return pshardSuccess;
}

}  // namespace

pshardResult_t pshardOptimizerStateNumEntries(pshardOptimizerState_t state,
                                              int* count) {
  constexpr char kCall[] = "pshardOptimizerStateNumEntries";
  if (count == nullptr) return NullArgument(kCall, "count");
  if (pshardResult_t r = CheckState(kCall, state); r != pshardSuccess) return r;
  *count = static_cast<int>(state->entries.size());
  return pshardSuccess;
}

pshardResult_t pshardOptimizerStateGetEntrySlice(
    pshardOptimizerState_t state, int index, const char** parameter,
    const char** key, int64_t* step, const float** data, int64_t* numel,
    int64_t* offset, int64_t* parameter_numel) {
  constexpr char kCall[] = "pshardOptimizerStateGetEntrySlice";
  if (parameter == nullptr) return NullArgument(kCall, "parameter");
  if (key == nullptr) return NullArgument(kCall, "key");
  if (step == nullptr) return NullArgument(kCall, "step");
  if (data == nullptr) return NullArgument(kCall, "data");
  if (numel == nullptr) return NullArgument(kCall, "numel");
  if (offset == nullptr) return NullArgument(kCall, "offset");
  if (parameter_numel == nullptr) {
    return NullArgument(kCall, "parameter_numel");
  }
  if (pshardResult_t r = CheckState(kCall, state); r != pshardSuccess) return r;
  if (index < 0 || static_cast<size_t>(index) >= state->entries.size()) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": index ", index, " is not in [0, ",
                             state->entries.size(), ")"));
  }
  const auto [p, t] = state->entries[index];
  const pshard::worker::ParameterOptimizerState& param =
      state->shard.params[p];
  *parameter = param.name.c_str();
  *step = param.step;
  *offset = param.offset;
  *parameter_numel = state->shard.parameter_numels[p];
  if (t == kStepOnly) {
    static const float kNoElements[1] = {0};
    *key = kStepOnlyKey;
    *data = kNoElements;
    *numel = 0;
    return pshardSuccess;
  }
  *key = param.tensors[t].first.c_str();
  *data = param.tensors[t].second.data();
  *numel = static_cast<int64_t>(param.tensors[t].second.size());
  return pshardSuccess;
}

pshardResult_t pshardOptimizerStateGetEntry(pshardOptimizerState_t state,
                                            int index, const char** parameter,
                                            const char** key, int64_t* step,
                                            const float** data,
                                            int64_t* numel) {
  constexpr char kCall[] = "pshardOptimizerStateGetEntry";
  if (parameter == nullptr) return NullArgument(kCall, "parameter");
  if (key == nullptr) return NullArgument(kCall, "key");
  if (step == nullptr) return NullArgument(kCall, "step");
  if (data == nullptr) return NullArgument(kCall, "data");
  if (numel == nullptr) return NullArgument(kCall, "numel");
  int64_t offset = 0, whole = 0;
  const pshardResult_t r = pshardOptimizerStateGetEntrySlice(
      state, index, parameter, key, step, data, numel, &offset, &whole);
  if (r != pshardSuccess) {
    // The last error names the call it came from.
    return Fail(r, absl::StrCat(kCall, " -> ", last_error));
  }
  const bool step_only = std::string_view(*key) == kStepOnlyKey;
  if (offset != 0 || (*numel != whole && !step_only)) {
    return Fail(pshardInvalidUsage,
                absl::StrCat(kCall, ": entry ", index, " (parameter '",
                             *parameter, "') holds elements [", offset, ", ",
                             offset + *numel, ") of its ", whole,
                             ": a slice (assignment_policy SHARDED); read it "
                             "with pshardOptimizerStateGetEntrySlice"));
  }
  return pshardSuccess;
}

pshardResult_t pshardOptimizerStateSpec(pshardOptimizerState_t state,
                                        const char** optimizer_json) {
  constexpr char kCall[] = "pshardOptimizerStateSpec";
  if (optimizer_json == nullptr) return NullArgument(kCall, "optimizer_json");
  if (pshardResult_t r = CheckState(kCall, state); r != pshardSuccess) return r;
  *optimizer_json = state->shard.optimizer_json.c_str();
  return pshardSuccess;
}

pshardResult_t pshardOptimizerStateFree(pshardOptimizerState_t state) {
  if (state == nullptr) return pshardSuccess;
  if (pshardResult_t r = CheckState("pshardOptimizerStateFree", state);
      r != pshardSuccess) {
    return r;
  }
  state->magic = 0;
  delete state;
  return pshardSuccess;
}

namespace {

// pshardImportOptimizerState(Slices): with `slices` false, whole parameters
// only (`offsets` unused).
pshardResult_t ImportEntries(const char* kCall, pshardSession_t session,
                             const char* optimizer_json, int count,
                             const char* const* parameters,
                             const char* const* keys, const int64_t* steps,
                             bool slices, const int64_t* offsets,
                             const float* const* data, const int64_t* numels) {
  if (optimizer_json == nullptr) return NullArgument(kCall, "optimizer_json");
  if (count < 0) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": count must be >= 0, got ", count));
  }
  if (count > 0) {
    if (parameters == nullptr) return NullArgument(kCall, "parameters");
    if (keys == nullptr) return NullArgument(kCall, "keys");
    if (steps == nullptr) return NullArgument(kCall, "steps");
    if (data == nullptr) return NullArgument(kCall, "data");
    if (numels == nullptr) return NullArgument(kCall, "numels");
  }
  return Guarded(kCall, [&]() -> pshardResult_t {
    std::vector<pshard::worker::ParameterOptimizerState> params;
    // (parameter name, offset) -> params[i]
    std::map<std::pair<std::string, int64_t>, size_t> index;
    std::map<std::string, int64_t> step_of;  // parameter name -> its step
    for (int i = 0; i < count; ++i) {
      const bool step_only =
          keys[i] != nullptr && std::string_view(keys[i]) == kStepOnlyKey;
      if (parameters[i] == nullptr || keys[i] == nullptr ||
          (data[i] == nullptr && !step_only)) {
        return Fail(pshardInvalidArgument,
                    absl::StrCat(kCall, ": entry ", i,
                                 " has a NULL parameter, key or data"));
      }
      if (step_only && numels[i] != 0) {
        return Fail(pshardInvalidArgument,
                    absl::StrCat(kCall, ": entry ", i, " (", parameters[i],
                                 "): key \"step\" carries the step only; "
                                 "numel must be 0, got ", numels[i]));
      }
      if (numels[i] < 0 || numels[i] > (int64_t{1} << 40)) {
        return Fail(pshardInvalidArgument,
                    absl::StrCat(kCall, ": entry ", i, " (", parameters[i],
                                 "): numel ", numels[i], " is out of range"));
      }
      const int64_t offset = slices ? offsets[i] : 0;
      if (offset < 0 || offset > (int64_t{1} << 40)) {
        return Fail(pshardInvalidArgument,
                    absl::StrCat(kCall, ": entry ", i, " (", parameters[i],
                                 "): offset ", offset, " is out of range"));
      }
      auto [it, added] = index.try_emplace(
          std::make_pair(std::string(parameters[i]), offset), params.size());
      if (added) {
        params.emplace_back();
        params.back().name = parameters[i];
        params.back().step = steps[i];
        params.back().offset = offset;
      }
      pshard::worker::ParameterOptimizerState& param = params[it->second];
      const int64_t step = step_of.try_emplace(param.name, steps[i]).first->second;
      if (step != steps[i]) {
        return Fail(pshardInvalidArgument,
                    absl::StrCat(kCall, ": parameter '", param.name,
                                 "' has entries with steps ", step, " and ",
                                 steps[i]));
      }
      // A step only: the entry exists now, with its step checked (several
      // ranks may give one for the same parameter).
      if (step_only) continue;
      for (const auto& tensor : param.tensors) {
        if (tensor.first == keys[i]) {
          return Fail(pshardInvalidArgument,
                      absl::StrCat(kCall, ": parameter '", param.name,
                                   "' has '", keys[i], "' twice",
                                   slices ? absl::StrCat(" at offset ", offset)
                                          : ""));
        }
      }
      param.tensors.emplace_back(
          keys[i], std::vector<float>(data[i], data[i] + numels[i]));
    }
    return WithSession(kCall, session, [&](Session& s) {
      return Return(
          s.ImportOptimizerState(optimizer_json, std::move(params), slices));
    });
  });
}

}  // namespace

pshardResult_t pshardImportOptimizerState(
    pshardSession_t session, const char* optimizer_json, int count,
    const char* const* parameters, const char* const* keys,
    const int64_t* steps, const float* const* data, const int64_t* numels) {
  return ImportEntries("pshardImportOptimizerState", session, optimizer_json,
                       count, parameters, keys, steps, /*slices=*/false,
                       /*offsets=*/nullptr, data, numels);
}

pshardResult_t pshardImportOptimizerStateSlices(
    pshardSession_t session, const char* optimizer_json, int count,
    const char* const* parameters, const char* const* keys,
    const int64_t* steps, const int64_t* offsets, const float* const* data,
    const int64_t* numels) {
  constexpr char kCall[] = "pshardImportOptimizerStateSlices";
  if (count > 0 && offsets == nullptr) return NullArgument(kCall, "offsets");
  return ImportEntries(kCall, session, optimizer_json, count, parameters, keys,
                       steps, /*slices=*/true, offsets, data, numels);
}

pshardResult_t pshardWaitParameter(pshardSession_t session, int index) {
  constexpr char kCall[] = "pshardWaitParameter";
  return WithSession(kCall, session, [&](Session& s) {
    if (absl::Status prepared = s.CheckPrepared(); !prepared.ok()) {
      return Return(prepared);
    }
    if (index < 0 || index >= s.num_parameters()) {
      return Fail(pshardInvalidArgument,
                  absl::StrCat(kCall, ": index ", index, " is not a parameter "
                               "index (", s.num_parameters(), " registered)"));
    }
    return Return(s.WaitForParameter(index));
  });
}

pshardResult_t pshardSaveCheckpoint(pshardSession_t session, int64_t step) {
  return WithSession("pshardSaveCheckpoint", session, [&](Session& s) {
    return Return(s.SaveCheckpoint(step));
  });
}

pshardResult_t pshardSaveCheckpointWithState(pshardSession_t session,
                                             int64_t step, const void* state,
                                             int64_t size) {
  constexpr char kCall[] = "pshardSaveCheckpointWithState";
  if (pshardResult_t checked = CheckBytesArgument(kCall, state, size, "state");
      checked != pshardSuccess) {
    return checked;
  }
  return WithSession(kCall, session, [&](Session& s) {
    // Before the copy below reads `size` bytes of the caller's memory.
    if (absl::Status fits = pshard::checkpoint::CheckProgramStateSize(size);
        !fits.ok()) {
      return Fail(pshardInvalidArgument,
                  absl::StrCat(kCall, ": ", fits.message()));
    }
    return Return(s.SaveCheckpoint(
        step, std::string(static_cast<const char*>(state),
                          static_cast<size_t>(size))));
  });
}

pshardResult_t pshardGetLoadedProgramState(pshardSession_t session, int rank,
                                           const void** state, int64_t* size,
                                           int* found) {
  constexpr char kCall[] = "pshardGetLoadedProgramState";
  if (state == nullptr) return NullArgument(kCall, "state");
  if (size == nullptr) return NullArgument(kCall, "size");
  if (found == nullptr) return NullArgument(kCall, "found");
  if (rank < 0) {
    return Fail(pshardInvalidArgument,
                absl::StrCat(kCall, ": rank must be >= 0, got ", rank));
  }
  return WithSession(kCall, session, [&](Session& s) {
    const std::string* bytes = s.LoadedProgramState(rank);
    *found = bytes != nullptr ? 1 : 0;
    *state = bytes != nullptr ? bytes->data() : nullptr;
    *size = bytes != nullptr ? static_cast<int64_t>(bytes->size()) : 0;
    return pshardSuccess;
  });
}

pshardResult_t pshardLoadCheckpoint(pshardSession_t session, const char* path,
                                    int64_t* step) {
  if (step == nullptr) return NullArgument("pshardLoadCheckpoint", "step");
  return WithSession("pshardLoadCheckpoint", session, [&](Session& s) {
    absl::StatusOr<int64_t> loaded =
        s.LoadCheckpoint(path == nullptr ? "" : path);
    if (!loaded.ok()) return Return(loaded.status());
    *step = *loaded;
    return pshardSuccess;
  });
}

pshardResult_t pshardBarrier(pshardSession_t session) {
  return WithSession("pshardBarrier", session,
                     [&](Session& s) { return Return(s.Barrier()); });
}

pshardResult_t pshardSessionClose(pshardSession_t session) {
  if (session == nullptr) return pshardSuccess;
  if (session->magic != kLiveMagic) {
    return Fail(pshardInvalidArgument,
                "pshardSessionClose: session is not an open session");
  }
  pshardResult_t result = Guarded("pshardSessionClose", [&] {
    absl::MutexLock lock(&session->mu);
    absl::Status closed = session->session->Close();
    session->session.reset();
    return Return(closed);
  });
  session->magic = 0;
  delete session;
  return result;
}

}  // extern "C"
