// NcclBytesSent: the byte-count convention of nccl_communicator.h. Kept apart
// from the NCCL code so it builds (and is tested) without CUDA.
#include <cstdint>

#include "worker/gpu/nccl_communicator.h"

namespace pshard::worker {

int64_t NcclBytesSent(NcclOpKind kind, int64_t bytes, int world_size) {
  if (world_size <= 1 || bytes <= 0) return 0;
  const int64_t n = world_size;
  // Ring all-reduce: a reduce-scatter then an all-gather, each sending
  // (n-1)/n of the buffer. Reduce and broadcast (ring/pipelined chains):
  // every rank but the last in the chain forwards the whole buffer once, which
  // averages to (n-1)/n per rank.
  const int64_t factor = kind == NcclOpKind::kAllReduce ? 2 : 1;
  return factor * bytes * (n - 1) / n;
}

}  // namespace pshard::worker
