// Facts about job states shared by the coordinator, the CLI and the tests.
#ifndef PSHARD_COMMON_JOB_STATE_H_
#define PSHARD_COMMON_JOB_STATE_H_

#include "pshard/v1/job.pb.h"

namespace pshard {

// SUCCEEDED, FAILED and CANCELLED: the job will not change state again.
inline bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

}  // namespace pshard

#endif  // PSHARD_COMMON_JOB_STATE_H_
