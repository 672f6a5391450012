#include "worker/api/trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Open(
    const SessionEnvironment& env, std::vector<ParameterInfo> params,
    const TrainerOptions& options) {
  if (options.assignment_client != nullptr) {
    return absl::InvalidArgumentError(
        "Trainer::Open takes its owners from the environment's mode; "
        "assignment_client is for Create");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Open(env));
  return Configure(std::move(session), std::move(params), options);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    Communicator* comm, std::vector<ParameterInfo> params,
    const TrainerOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("Trainer needs a communicator");
  }
  AttachOptions attach;
  attach.assignment_client = options.assignment_client;
  attach.assignment_policy = options.assignment_policy;
  attach.timeout = options.timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                   Session::Attach(comm, attach));
  return Configure(std::move(session), std::move(params), options);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Configure(
    std::unique_ptr<Session> session, std::vector<ParameterInfo> params,
    const TrainerOptions& options) {
  RETURN_IF_ERROR(session->SetOptimizer(options.optimizer));
  RETURN_IF_ERROR(session->SetBucketCapMb(options.bucket_cap_mb));
  RETURN_IF_ERROR(session->SetCommMode(options.comm_mode));
  if (options.precision.has_value()) {
    RETURN_IF_ERROR(session->SetPrecision(*options.precision));
  }
  for (ParameterInfo& p : params) {
    if (p.name.empty()) {
      return absl::InvalidArgumentError("a parameter has no name");
    }
    if (p.shape.empty()) p.shape = {p.numel};
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    if (p.numel < 1 || numel != p.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", p.name, "\" has ", p.numel,
          " elements, which must be >= 1 and match its shape"));
    }
    RETURN_IF_ERROR(session
                        ->RegisterParameter(p.name, p.shape,
                                            session->precision().param_dtype)
                        .status());
  }
  RETURN_IF_ERROR(session->Prepare());
  return std::unique_ptr<Trainer>(new Trainer(std::move(session)));
}

Trainer::Trainer(std::unique_ptr<Session> session)
    : session_(std::move(session)) {}

Trainer::~Trainer() = default;

absl::StatusOr<std::vector<ParameterOptimizerState>>
Trainer::ExportOptimizerState() {
  ASSIGN_OR_RETURN(Session::OptimizerStateShard shard,
                   session_->ExportOptimizerState());
  return std::move(shard.params);
}

absl::Status Trainer::LoadOptimizerState(
    std::vector<ParameterOptimizerState> state) {
  return session_->LoadOptimizerState(std::move(state));
}

}  // namespace pshard::worker
