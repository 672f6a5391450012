// ConnectSharedMemory: finds the ranks that share this host and sets up the
// shared-memory rings of an ShmLink (shm_link.h) to each, through the
// rendezvous store. Apart from the communicator so that what "same host"
// means and how rings are exchanged can be read (and tested) on their own.
//
// Same host means the same kernel boot id (/proc/sys/kernel/random/boot_id)
// and host name: such ranks see the same /dev/shm. The exchange, all keys
// under options.key_prefix + "shm/":
//   1. host/<me> = my identity; read every peer's;
//   2. for each same-host peer and lane, create my outgoing ring and publish
//      its name under ring/<me>/<peer>/<lane> (empty if creation failed);
//   3. open the peer's rings to me; publish opened/<peer>/<me> = "1" or "0";
//   4. read opened/<me>/<peer>.
// A pair uses shared memory only when both directions worked, which both
// ranks of the pair can tell from the store; any other pair stays on TCP.
#ifndef PSHARD_WORKER_COMM_SHM_RENDEZVOUS_H_
#define PSHARD_WORKER_COMM_SHM_RENDEZVOUS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/comm/shm_link.h"

namespace pshard::worker {

// This machine's identity: ranks with equal ones may share memory.
std::string HostIdentity();

// Returns, by peer rank, the ShmLink to each same-host peer with which the
// rings could be set up, null for every other rank (and for options.rank).
// Errors are the store's (DeadlineExceeded when a peer does not publish
// within options.timeout); a ring that cannot be made is no error, it just
// leaves that pair on TCP.
absl::StatusOr<std::vector<std::unique_ptr<ShmLink>>> ConnectSharedMemory(
    const GlooOptions& options, KvClient& kv);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_SHM_RENDEZVOUS_H_
