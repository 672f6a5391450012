#include "coordinator/restart_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pshard {
namespace coordinator {
namespace {

constexpr absl::string_view kAfter = " after: ";
constexpr absl::string_view kWaiting = "; waiting for ";
constexpr absl::string_view kNeeds = "; needs ";

}  // namespace

bool RestartableCause(const v1::JobSpec& spec, v1::FailureCause cause) {
  switch (cause) {
    case v1::FAILURE_CAUSE_PEER:
    case v1::FAILURE_CAUSE_WORKER:
      return true;
    default:
      return spec.has_program() && spec.restart_on_program_failure();
  }
}

int MinRestartWorld(const v1::JobSpec& spec) {
  return spec.min_world_size() > 0 ? spec.min_world_size()
                                   : spec.world_size();
}

std::string RestartReason(int restart, int max_restarts,
                          absl::string_view cause) {
  return absl::StrCat("restart ", restart, " of ", max_restarts, kAfter,
                      cause);
}

std::string WaitingForRestartReason(absl::string_view restart_reason,
                                    int world_size, int min_world_size) {
  return absl::StrCat(restart_reason, kWaiting, world_size,
                      " idle workers (at least ", min_world_size, ")");
}

std::string RestartReasonOfWaiting(absl::string_view waiting_reason) {
  return QueuedReasonPrefix(waiting_reason);
}

std::string QueuedReason(absl::string_view prefix, const v1::JobSpec& spec,
                         bool restarting, int64_t pool) {
  const int need = restarting ? MinRestartWorld(spec) : spec.world_size();
  if (need > pool) {
    return absl::StrCat(prefix, kNeeds, need, " workers",
                        restarting ? " (min_world_size)" : "", "; ", pool,
                        pool == 1 ? " is" : " are",
                        " registered and not draining");
  }
  if (restarting) {
    return WaitingForRestartReason(prefix, spec.world_size(), need);
  }
  return absl::StrCat(prefix, kWaiting, spec.world_size(), " idle workers");
}

std::string QueuedReasonPrefix(absl::string_view queued_reason) {
  // The suffix is the last marker: the prefix (a failure's cause) may hold
  // either text, but no suffix holds the other's.
  const size_t waiting = queued_reason.rfind(kWaiting);
  const size_t needs = queued_reason.rfind(kNeeds);
  size_t at = absl::string_view::npos;
  if (waiting != absl::string_view::npos) at = waiting;
  if (needs != absl::string_view::npos &&
      (at == absl::string_view::npos || needs > at)) {
    at = needs;
  }
  return std::string(at == absl::string_view::npos
                         ? queued_reason
                         : queued_reason.substr(0, at));
}

std::string CauseOfRestartReason(absl::string_view restart_reason) {
  const size_t at = restart_reason.find(kAfter);
  return std::string(at == absl::string_view::npos
                         ? restart_reason
                         : restart_reason.substr(at + kAfter.size()));
}

std::vector<int64_t> PlaceRestart(const std::vector<IdleWorker>& idle,
                                  const std::set<int64_t>& survivors,
                                  int world_size, int min_world_size) {
  // Survivors first (they hold the job's data and warm caches), then the
  // others in number order.
  std::vector<IdleWorker> candidates;
  for (const IdleWorker& w : idle) {
    if (survivors.count(w.num) > 0) candidates.push_back(w);
  }
  for (const IdleWorker& w : idle) {
    if (survivors.count(w.num) == 0) candidates.push_back(w);
  }
  const int world =
      std::min(world_size, static_cast<int>(candidates.size()));
  if (world < std::max(min_world_size, 1)) return {};
  candidates.resize(world);
  return PlaceRanks(std::move(candidates), world);
}

}  // namespace coordinator
}  // namespace pshard
