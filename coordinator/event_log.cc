#include "coordinator/event_log.h"

#include <utility>

#include "common/proto_time.h"

namespace pshard {
namespace coordinator {

std::vector<WaitId> EventLog::Append(v1::JobEvent event, absl::Time now) {
  event.set_sequence(static_cast<int64_t>(events_.size()) + 1);
  *event.mutable_time() = ToProto(now);
  events_.push_back(std::move(event));
  return std::exchange(waiters_, {});
}

std::vector<v1::JobEvent> EventLog::Read(int64_t after_sequence,
                                         int max) const {
  std::vector<v1::JobEvent> out;
  for (int64_t i = after_sequence;
       i < static_cast<int64_t>(events_.size()) &&
       static_cast<int>(out.size()) < max;
       ++i) {
    out.push_back(events_[i]);
  }
  return out;
}

v1::JobEvent EventLog::TakeProgressEvent(const v1::JobProgress& progress,
                                         absl::Time now) {
  progress_dirty_ = false;
  last_progress_event_ = now;
  v1::JobEvent event;
  *event.mutable_progress() = progress;
  return event;
}

}  // namespace coordinator
}  // namespace pshard
