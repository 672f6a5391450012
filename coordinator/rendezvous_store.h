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
// A read of several keys (KvRead) waits for one missing key at a time: the
// first one after those found present. Each Put of that key moves it on, so
// a read of n keys costs O(n) over its life, however the keys arrive.
//
// Caps (RendezvousLimits): key length, value size, keys and bytes per job,
// bytes of all jobs' stores together (one counter shared by them), keys and
// answer bytes per read.
// Errors:
//   InvalidArgument: key not 1..max_key_bytes, value over max_value_bytes,
//     no keys or more than max_keys_per_read (CheckKey/CheckValue/CheckKeys,
//     before the job is looked up).
//   ResourceExhausted: the job's store or all stores together are full.
#ifndef PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_
#define PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <memory>
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
  int max_keys_per_read = 1 << 16;
  // An answer stops before the value that would take it over this (it holds
  // at least one value). A rendezvous wakes every rank's read at once, so
  // this bounds that burst to ranks x 256 KiB: at 2 MiB, 1,024 ranks' full
  // mesh (2.2 MB read per rank) built 2 GiB of answers at once and starved
  // the heartbeats (docs/BENCHMARKS.md, "Rendezvous reads").
  int64_t max_read_bytes = int64_t{256} << 10;
};

// A stored value, shared so that an answer takes its values under the
// coordinator's lock without copying them: the copy into a response is made
// after the lock is released (a rendezvous may answer a thousand reads of
// megabytes at once).
using KvValue = std::shared_ptr<const std::string>;

// A read of `keys` (checked) as it waits for them.
struct KvRead {
  std::vector<std::string> keys;
  // keys[0..present) were found present; `bytes`, their values' size.
  size_t present = 0;
  int64_t bytes = 0;
};

// DeadlineExceeded for `read`, naming its first missing key (and, for a
// read of several, how many were present).
absl::Status KvReadMissing(const KvRead& read);

class RendezvousStore {
 public:
  using WaitId = uint64_t;

  static absl::Status CheckKey(absl::string_view key,
                               const RendezvousLimits& limits);
  static absl::Status CheckValue(absl::string_view value,
                                 const RendezvousLimits& limits);
  // 1..max_keys_per_read keys, each as CheckKey (the error names its index).
  static absl::Status CheckKeys(const std::vector<std::string>& keys,
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

  // Moves read.present over the keys present. True when the read can be
  // answered: every key is present, or the next one would take the answer
  // over max_read_bytes. Otherwise the read waits for keys[present].
  bool Advance(KvRead& read, const RendezvousLimits& limits) const;
  // The values of keys[0..read.present) (all present), in order, cut again
  // at max_read_bytes after the first: a key Put again since Advance may
  // have grown.
  std::vector<KvValue> Values(const KvRead& read,
                              const RendezvousLimits& limits) const;

  // Empties the store (returning its bytes to `total_bytes`); the waits
  // that were pending on it, to fail.
  std::vector<WaitId> Clear(int64_t& total_bytes);

  int64_t bytes() const { return bytes_; }
  size_t size() const { return values_.size(); }

 private:
  absl::flat_hash_map<std::string, KvValue> values_;
  // Keys and values.
  int64_t bytes_ = 0;
  absl::flat_hash_map<std::string, std::vector<WaitId>> waiters_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_RENDEZVOUS_STORE_H_
