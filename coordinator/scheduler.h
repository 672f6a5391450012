// Gang placement of one job's ranks onto idle workers: a pure function, so the
// rank layout is deterministic and testable without a coordinator.
#ifndef PSHARD_COORDINATOR_SCHEDULER_H_
#define PSHARD_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pshard {
namespace coordinator {

struct IdleWorker {
  // The worker's number (the n of "w-<n>").
  int64_t num = 0;
  std::string host;
};

// Picks `world_size` of `idle` for one job and orders them by rank, or
// returns an empty vector when there are fewer than world_size idle workers
// (gang scheduling: all ranks or none).
//
// Ranks are grouped by host (ranks on one host are contiguous, which keeps
// ring neighbours local). Hosts with the most idle workers are filled first so
// a job spans as few hosts as possible; ties go to the host name, then to the
// lower worker number.
std::vector<int64_t> PlaceRanks(std::vector<IdleWorker> idle, int world_size);

// Where each rank of a job sits on its host.
struct LocalRank {
  // Among the ranks on the same host, in rank order: this one's index...
  int local_rank = 0;
  // ... and how many there are.
  int local_world_size = 1;
};

// `host_of_rank[r]` is rank r's host; the result has one entry per rank
// (RunJobDirective.local_rank/local_world_size). Ranks need not be
// contiguous per host for this to be defined, though PlaceRanks makes them
// so.
std::vector<LocalRank> LocalRanks(const std::vector<std::string>& host_of_rank);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_SCHEDULER_H_
