#include "worker/comm/communicator.h"
#include "worker/comm/reduce_ops.h"

namespace pshard::worker {

void DivideInPlace(void* data, int64_t count, DataType dtype, float divisor) {
  if (dtype == DataType::kFloat32) {
    float* __restrict d = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) d[i] /= divisor;
  } else {
    uint16_t* d = static_cast<uint16_t*>(data);
    for (int64_t i = 0; i < count; ++i) {
      d[i] = FloatToBFloat16(BFloat16ToFloat(d[i]) / divisor);
    }
  }
}

}  // namespace pshard::worker
