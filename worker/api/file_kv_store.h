// FileKvStore: a KvClient over a directory that every rank of a run can see,
// for the C API's local test mode (PSHARD_LOCAL_STORE), where no coordinator
// runs: ranks started as separate processes by a test find each other
// through it. Each key is one file, written to a temporary name and renamed
// into place, so a reader sees either no value or the whole value.
//
// Not for real jobs: nothing scopes the keys by job or attempt (use a fresh
// directory per run) and Get polls the directory.
#ifndef PSHARD_WORKER_API_FILE_KV_STORE_H_
#define PSHARD_WORKER_API_FILE_KV_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/comm/kv_store.h"

namespace pshard::worker {

class FileKvStore : public KvClient {
 public:
  // `directory` must exist; `clock` measures Get's timeout and must outlive
  // the store.
  explicit FileKvStore(std::string directory,
                       const Clock& clock = Clock::Real());

  // Errors: Unavailable if the file cannot be written (the path is named).
  absl::Status Put(const std::string& key, const std::string& value) override;
  // Errors: DeadlineExceeded naming the key and the directory.
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

  // The file that holds `key` (any byte of the key is allowed: all but
  // [A-Za-z0-9._-] are %-escaped).
  std::string PathOf(const std::string& key) const;

 private:
  const std::string directory_;
  const Clock& clock_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_API_FILE_KV_STORE_H_
