// comm_benchmark: bandwidth of the GlooCommunicator's operations between
// ranks (threads) on loopback, by operation and piece size.
//
//   bazel run //worker/comm:comm_benchmark -- --op=broadcast --mb=64 --piece_kb=2048
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/rank_threads.h"

ABSL_FLAG(int, world, 2, "ranks (threads)");
ABSL_FLAG(std::string, op, "broadcast",
          "broadcast | reduce | allreduce | exchange (each rank reduces half "
          "to the other: both directions busy)");
ABSL_FLAG(int64_t, mb, 64, "MiB per operation");
ABSL_FLAG(int64_t, piece_kb, 2048, "split into pieces of this many KiB");
ABSL_FLAG(int, iters, 5, "timed iterations");
ABSL_FLAG(bool, shared_memory, true,
          "shared-memory rings between the ranks; false: loopback TCP only");

namespace pshard::worker {
namespace {

int Main() {
  const int world = absl::GetFlag(FLAGS_world);
  const std::string op = absl::GetFlag(FLAGS_op);
  const int64_t count = absl::GetFlag(FLAGS_mb) << 18;  // floats
  const int64_t piece = std::max<int64_t>(1, absl::GetFlag(FLAGS_piece_kb) << 8);
  const int iters = absl::GetFlag(FLAGS_iters);
  InMemoryKvStore store;
  std::vector<double> ms(world);
  std::vector<absl::Status> statuses =
      RunRanks(world, [&](int r) -> absl::Status {
        GlooOptions options;
        options.rank = r;
        options.world_size = world;
        options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
        ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         CreateGlooCommunicator(options, store));
        std::vector<float> data(count, 1.0f);
        std::vector<double> times;
        for (int it = 0; it < iters + 1; ++it) {
          // A benchmark measures real elapsed time: absl::Now, not a Clock.
          const absl::Time start = absl::Now();
          std::vector<std::shared_ptr<Work>> works;
          for (int64_t off = 0, k = 0; off < count; off += piece, ++k) {
            const int64_t n = std::min(piece, count - off);
            float* p = data.data() + off;
            if (op == "broadcast") {
              works.push_back(comm->Broadcast(p, n, DataType::kFloat32, 0));
            } else if (op == "reduce") {
              works.push_back(comm->Reduce(p, n, DataType::kFloat32, 0));
            } else if (op == "allreduce") {
              works.push_back(comm->AllReduce(p, n, DataType::kFloat32));
            } else {
              works.push_back(comm->Reduce(p, n, DataType::kFloat32,
                                           static_cast<int>(k % world)));
            }
          }
          for (auto& w : works) RETURN_IF_ERROR(w->Wait(absl::Seconds(60)));
          if (it > 0) {
            times.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
          }
        }
        std::sort(times.begin(), times.end());
        ms[r] = times[times.size() / 2];
        return absl::OkStatus();
      });
  if (absl::Status error = FirstError(statuses); !error.ok()) {
    std::fprintf(stderr, "%s\n", error.ToString().c_str());
    return 1;
  }
  const double bytes = count * 4.0;
  std::printf("{\"op\": \"%s\", \"world\": %d, \"mb\": %lld, \"piece_kb\": %lld, "
              "\"shared_memory\": %s, \"ms_median\": %.1f, "
              "\"algbw_gbps\": %.2f}\n",
              op.c_str(), world, static_cast<long long>(absl::GetFlag(FLAGS_mb)),
              static_cast<long long>(absl::GetFlag(FLAGS_piece_kb)),
              absl::GetFlag(FLAGS_shared_memory) ? "true" : "false", ms[0],
              bytes / (ms[0] * 1e6));
  return 0;
}

}  // namespace
}  // namespace pshard::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pshard::worker::Main();
}
