// The one switch for OpenBLAS's thread count, which the mlp workload's matrix
// products use. The library never sets it on its own: the worker binary (or a
// test) calls this once at start-up. One thread makes the mlp's forward and
// backward bit-reproducible and leaves the cores to the communicator; the
// pshard-worker binary uses 1 unless told otherwise.
#ifndef PSHARD_WORKER_WORKLOAD_BLAS_THREADS_H_
#define PSHARD_WORKER_WORKLOAD_BLAS_THREADS_H_

namespace pshard::worker {

// Sets the number of threads OpenBLAS uses for every later call in this
// process (openblas_set_num_threads). n >= 1.
void SetBlasNumThreads(int n);

// The current setting (openblas_get_num_threads).
int BlasNumThreads();

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_WORKLOAD_BLAS_THREADS_H_
