// The one place where the server frames protobuf bytes by hand, for the
// WorkerControl methods it serves raw (see WorkerControlImpl):
//   - Heartbeat replies splice a RunJob's spec, serialized once per epoch,
//     into every rank's reply by reference;
//   - ReportBuckets requests are read without parsing their layout, which
//     is copied out verbatim as an EncodedLayout for the coordinator to
//     compare by bytes.
// Field numbers are those of proto/pshard/v1/worker_control.proto, named
// below; wire_codec_test checks every function against the generated parser.
#ifndef PSHARD_SERVER_WIRE_CODEC_H_
#define PSHARD_SERVER_WIRE_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/coordinator.h"
#include "google/protobuf/duration.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace server {
namespace wire {

// HeartbeatResponse.directives
inline constexpr int kHeartbeatResponseDirectives = 1;
inline constexpr int kHeartbeatResponseJobCheckpointStep = 2;
// Directive.run_job
inline constexpr int kDirectiveRunJob = 1;
// RunJobDirective.spec
inline constexpr int kRunJobDirectiveSpec = 5;
// ReportBucketsRequest fields.
inline constexpr int kReportBucketsJobId = 1;
inline constexpr int kReportBucketsEpoch = 2;
inline constexpr int kReportBucketsRank = 3;
inline constexpr int kReportBucketsWorkerId = 4;
inline constexpr int kReportBucketsBuckets = 5;
inline constexpr int kReportBucketsLayoutFingerprint = 6;
inline constexpr int kReportBucketsTimeout = 7;

// The wire form of a RunJobDirective holding only `spec`. Appended to a
// serialized RunJobDirective it completes it (protobuf merges concatenated
// messages).
std::string EncodeRunJobSpecTail(const v1::JobSpec& spec);

// A HeartbeatResponse as pieces to send in order: bytes, or nullopt where
// the spec tail (EncodeRunJobSpecTail, `tail_size` bytes) goes, once after
// each RunJob directive. `response`'s RunJob directives must lack `spec`;
// with tail_size == nullopt (no shared spec) every directive is written
// whole. The other fields follow the directives.
std::vector<std::optional<std::string>> EncodeHeartbeatResponse(
    const v1::HeartbeatResponse& response, std::optional<size_t> tail_size);

// A ReportBucketsRequest, read without parsing its buckets.
struct ReportBucketsFrame {
  // The request's layout encoded as received, job, rank and fingerprint.
  // rank is -1 when it is outside int32.
  coordinator::Coordinator::LayoutReport report;
  google::protobuf::Duration timeout;
};
// InvalidArgument: the bytes are not a ReportBucketsRequest.
absl::StatusOr<ReportBucketsFrame> DecodeReportBucketsRequest(
    absl::string_view bytes);

}  // namespace wire
}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_WIRE_CODEC_H_
