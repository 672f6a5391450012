// RunRanks: N ranks of one job as threads of one test (or benchmark), the
// shape of Gloo's own tests. Every rank's function runs on its own thread,
// all at once (rendezvous needs every rank present), and returns a Status;
// the caller gets every rank's status back, so that a failing rank is
// reported with its number instead of an ASSERT that would only end the
// thread it ran on.
//
//   std::vector<absl::Status> statuses = RunRanks(world, [&](int rank) {
//     ASSIGN_OR_RETURN(auto comm, CreateGlooCommunicator(options(rank), kv));
//     ...
//     return absl::OkStatus();
//   });
//   EXPECT_OK(FirstError(statuses));
//
// CreateGlooRanks connects a world of Gloo communicators that way.
#ifndef PSHARD_WORKER_COMM_RANK_THREADS_H_
#define PSHARD_WORKER_COMM_RANK_THREADS_H_

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"

namespace pshard::worker {

// Runs `body(rank)` for rank 0 .. world_size - 1, each on its own thread,
// and returns once all have returned: statuses[rank] is rank's result.
std::vector<absl::Status> RunRanks(
    int world_size, const std::function<absl::Status(int rank)>& body);

// OK if every status is; otherwise the lowest failing rank's status, its
// message prefixed with "rank <r>: ".
absl::Status FirstError(const std::vector<absl::Status>& statuses);

// RunRanks for bodies that compute a value: every rank's value, or
// FirstError of their statuses.
template <typename T>
absl::StatusOr<std::vector<T>> RunRanksFor(
    int world_size, const std::function<absl::StatusOr<T>(int rank)>& body) {
  std::vector<std::optional<T>> values(world_size);
  std::vector<absl::Status> statuses = RunRanks(world_size, [&](int rank) {
    absl::StatusOr<T> value = body(rank);
    if (!value.ok()) return value.status();
    values[rank] = *std::move(value);
    return absl::OkStatus();
  });
  if (absl::Status error = FirstError(statuses); !error.ok()) return error;
  std::vector<T> out;
  out.reserve(world_size);
  for (auto& value : values) out.push_back(*std::move(value));
  return out;
}

// Connects ranks 0 .. world_size - 1 through `kv`, concurrently, each with
// `options` but its own rank and world size.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateGlooRanks(
    int world_size, const GlooOptions& options, KvClient& kv);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_RANK_THREADS_H_
