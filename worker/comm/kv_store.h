// KvClient: the key/value rendezvous a communicator needs to find its peers
// (Gloo addresses; an NCCL unique id). In a job it is the coordinator's
// KvPut/KvGet, scoped by (job id, epoch); in tests, InMemoryKvStore.
#ifndef PSHARD_WORKER_COMM_KV_STORE_H_
#define PSHARD_WORKER_COMM_KV_STORE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "absl/time/time.h"

namespace pshard::worker {

class KvClient {
 public:
  virtual ~KvClient() = default;

  // Stores `value` under `key`, replacing any previous value.
  virtual absl::Status Put(const std::string& key,
                           const std::string& value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to appear.
  // DeadlineExceeded if it does not; Cancelled/Aborted if the wait was
  // interrupted (job aborted).
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;

  // The values of `keys`, in order: what a rank reads of every peer at
  // rendezvous (no keys: no values, nothing asked). Errors as Get. The whole
  // read is bounded by `timeout`: this default Gets each key in turn with
  // what remains of it; the coordinator's client reads them in one call.
  virtual absl::StatusOr<std::vector<std::string>> GetMany(
      absl::Span<const std::string> keys, absl::Duration timeout);
};

// Every peer's value at rendezvous: key_of(r) for each rank r of
// `world_size` but `rank`, read with one GetMany. Indexed by rank; the entry
// of `rank` itself is empty. Errors as GetMany.
absl::StatusOr<std::vector<std::string>> GetFromEveryPeer(
    KvClient& kv, int world_size, int rank,
    absl::FunctionRef<std::string(int)> key_of, absl::Duration timeout);

// A thread-safe in-process store, for tests that run ranks as threads.
class InMemoryKvStore : public KvClient {
 public:
  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_KV_STORE_H_
