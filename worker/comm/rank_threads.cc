#include "worker/comm/rank_threads.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace pshard::worker {

std::vector<absl::Status> RunRanks(
    int world_size, const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> statuses(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&statuses, &body, r] { statuses[r] = body(r); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

absl::Status FirstError(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat("rank ", r, ": ",
                                       statuses[r].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateGlooRanks(
    int world_size, const GlooOptions& options, KvClient& kv) {
  return RunRanksFor<std::unique_ptr<Communicator>>(
      world_size,
      [&](int rank) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        GlooOptions mine = options;
        mine.rank = rank;
        mine.world_size = world_size;
        return CreateGlooCommunicator(mine, kv);
      });
}

}  // namespace pshard::worker
