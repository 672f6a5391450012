// A job's rendezvous store: keys and values its ranks exchange (addresses,
// communicator ids) for one epoch, in the shape of TSL's KeyValueStore: Put
// sets a key, Get reads it, and a Get of a missing key waits until it is
// Put. The waits themselves live in the coordinator's wait registry; this
// store only remembers which waits want which key and hands them back.
//
// Lifetime: empty when an epoch starts; Clear() when the job ends or
// restarts (which also hands back every wait, to fail them). Called under
// the coordinator's lock; not thread-safe itself.
//
// Caps (RendezvousLimits): key length, value size, keys and bytes per job,
// and bytes of all jobs' stores together (one counter shared by them).
// Errors:
//   InvalidArgument: key not 1..max_key_bytes, value over max_value_bytes
//     (CheckKey/CheckValue, before the job is looked up).
//   ResourceExhausted: the job's store or all stores together are full.
#ifndef PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_
#define PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard {
namespace coordinator {

struct RendezvousLimits {
  int max_key_bytes = 512;
  int64_t max_value_bytes = int64_t{1} << 20;
  int64_t max_keys_per_job = int64_t{1} << 18;
  int64_t max_bytes_per_job = int64_t{256} << 20;
  int64_t max_bytes_total = int64_t{1} << 30;
};

class RendezvousStore {
 public:
  using WaitId = uint64_t;

  static absl::Status CheckKey(absl::string_view key,
                               const RendezvousLimits& limits);
  static absl::Status CheckValue(absl::string_view value,
                                 const RendezvousLimits& limits);

  // Sets `key` (already checked) to `value`; the waits that wanted it, to
  // complete with `value`. `total_bytes` counts all jobs' stores; `job_id`
  // names the job in errors.
  absl::StatusOr<std::vector<WaitId>> Put(absl::string_view job_id,
                                          absl::string_view key,
                                          absl::string_view value,
                                          const RendezvousLimits& limits,
                                          int64_t& total_bytes);
  // The value of `key`, or null.
  const std::string* Get(absl::string_view key) const;
  // Remembers that wait `id` wants `key`.
  void AddWaiter(absl::string_view key, WaitId id);

  // Empties the store (returning its bytes to `total_bytes`); the waits
  // that were pending on it, to fail.
  std::vector<WaitId> Clear(int64_t& total_bytes);

  int64_t bytes() const { return bytes_; }
  size_t size() const { return values_.size(); }

 private:
  absl::flat_hash_map<std::string, std::string> values_;
  // Keys and values.
  int64_t bytes_ = 0;
  absl::flat_hash_map<std::string, std::vector<WaitId>> waiters_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_
