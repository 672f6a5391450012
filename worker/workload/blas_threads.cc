#include "worker/workload/blas_threads.h"

#include <cblas.h>

namespace pshard::worker {

void SetBlasNumThreads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

int BlasNumThreads() { return openblas_get_num_threads(); }

}  // namespace pshard::worker
