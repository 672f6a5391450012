#include "coordinator/scheduler.h"

#include <algorithm>
#include <map>

namespace pshard {
namespace coordinator {

std::vector<int64_t> PlaceRanks(std::vector<IdleWorker> idle, int world_size) {
  if (world_size < 1 || static_cast<int64_t>(idle.size()) < world_size) {
    return {};
  }
  std::map<std::string, std::vector<int64_t>> by_host;
  for (const IdleWorker& w : idle) by_host[w.host].push_back(w.num);
  std::vector<std::pair<std::string, std::vector<int64_t>>> hosts(
      by_host.begin(), by_host.end());
  for (auto& [host, nums] : hosts) std::sort(nums.begin(), nums.end());
  // std::map iteration already orders by host name; a stable sort by size
  // keeps that as the tie-break.
  std::stable_sort(hosts.begin(), hosts.end(), [](const auto& a, const auto& b) {
    return a.second.size() > b.second.size();
  });
  std::vector<int64_t> ranks;
  ranks.reserve(world_size);
  for (const auto& [host, nums] : hosts) {
    for (int64_t num : nums) {
      if (static_cast<int>(ranks.size()) == world_size) return ranks;
      ranks.push_back(num);
    }
  }
  return ranks;
}

std::vector<LocalRank> LocalRanks(
    const std::vector<std::string>& host_of_rank) {
  std::map<std::string, int> count;
  for (const std::string& host : host_of_rank) ++count[host];
  std::map<std::string, int> next;
  std::vector<LocalRank> out(host_of_rank.size());
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    out[r].local_rank = next[host_of_rank[r]]++;
    out[r].local_world_size = count[host_of_rank[r]];
  }
  return out;
}

}  // namespace coordinator
}  // namespace pshard
