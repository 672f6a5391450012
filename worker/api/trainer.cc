#include "worker/api/trainer.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/hook/zero_hook.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/runtime/assignment_client.h"

namespace pshard::worker {

namespace {

// The coordinator's assignment through the client, or one computed here.
absl::StatusOr<AssignmentProvider> MakeProvider(const Communicator& comm,
                                                const TrainerOptions& options) {
  const int world = comm.world_size();
  if (AssignmentClient* client = options.assignment_client; client != nullptr) {
    if (client->options().rank != comm.rank() ||
        client->options().world_size != world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the assignment client is rank ", client->options().rank, " of ",
          client->options().world_size, ", the communicator rank ",
          comm.rank(), " of ", world));
    }
    return client->Provider(options.timeout, [] { return absl::OkStatus(); });
  }
  return LocalAssignmentProvider(options.assignment_policy, world);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    Communicator* comm, std::vector<ParameterInfo> params,
    const TrainerOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("Trainer needs a communicator");
  }
  std::set<std::string> names;
  for (ParameterInfo& p : params) {
    if (p.name.empty()) {
      return absl::InvalidArgumentError("a parameter has no name");
    }
    if (!names.insert(p.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter name \"", p.name, "\" is used twice"));
    }
    if (p.shape.empty()) p.shape = {p.numel};
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    if (p.numel < 1 || numel != p.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", p.name, "\" has ", p.numel,
          " elements, which must be >= 1 and match its shape"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                   ShardOptimizer::Create(options.optimizer));
  ASSIGN_OR_RETURN(AssignmentProvider provider, MakeProvider(*comm, options));
  ZeroHookOptions hook_options;
  hook_options.comm_mode = options.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST
                               ? v1::JobSpec::ALLREDUCE_BROADCAST
                               : v1::JobSpec::REDUCE_BROADCAST;
  hook_options.bucket_cap_mb = options.bucket_cap_mb;
  hook_options.timeout = options.timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<ZeroHook> hook,
                   ZeroHook::Create(std::move(params), comm,
                                    std::move(optimizer), std::move(provider),
                                    hook_options));
  return std::unique_ptr<Trainer>(new Trainer(comm, std::move(hook)));
}

Trainer::Trainer(Communicator* comm, std::unique_ptr<ZeroHook> hook)
    : comm_(comm), hook_(std::move(hook)) {}

Trainer::~Trainer() = default;

int Trainer::num_parameters() const {
  return static_cast<int>(hook_->parameter_infos().size());
}

absl::Span<float> Trainer::parameter(int i) {
  if (i < 0 || i >= num_parameters()) return {};
  return absl::Span<float>(hook_->params()[i], hook_->parameter_infos()[i].numel);
}

absl::Span<float> Trainer::gradient(int i) {
  if (i < 0 || i >= num_parameters()) return {};
  return absl::Span<float>(hook_->grads()[i], hook_->parameter_infos()[i].numel);
}

absl::Status Trainer::GradientReady(int i) {
  return hook_->MarkGradientReady(i);
}

absl::Status Trainer::FinishStep() { return hook_->FinishStep(); }

int64_t Trainer::step() const { return hook_->steps_finished(); }

int Trainer::num_buckets() const { return hook_->layout().num_buckets(); }

std::vector<int> Trainer::owned_buckets() const {
  std::vector<int> owned;
  for (size_t b = 0; b < hook_->owners().size(); ++b) {
    if (hook_->owners()[b] == comm_->rank()) owned.push_back(static_cast<int>(b));
  }
  return owned;
}

int64_t Trainer::optimizer_state_bytes() const {
  return hook_->optimizer().total_state_bytes();
}

absl::StatusOr<std::vector<ParameterOptimizerState>>
Trainer::ExportOptimizerState() const {
  return hook_->ExportOptimizerState();
}

absl::Status Trainer::LoadOptimizerState(
    std::vector<ParameterOptimizerState> state) {
  return hook_->SetInitialOptimizerState(std::move(state));
}

}  // namespace pshard::worker
