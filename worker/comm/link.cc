#include "worker/comm/link.h"

#include <cstring>

#include "worker/comm/reduce_ops.h"

namespace pshard::worker {

void Deliver(const Delivery& into, int64_t offset, const char* data,
             int64_t length) {
  char* dst = into.dst + offset;
  if (!into.add) {
    std::memcpy(dst, data, length);
    return;
  }
  const int64_t count = length / DataTypeSize(into.dtype);
  if (into.divisor > 0) {
    AddIntoAndDivide(dst, data, count, into.dtype, into.divisor);
  } else {
    AddInto(dst, data, count, into.dtype);
  }
}

}  // namespace pshard::worker
