// Test base: a ControlPlane on which every call is unexpected (the test
// fails, naming the call, and the call returns Unimplemented). Tests'
// fakes derive from it and override the calls the code under test makes.
#ifndef PSHARD_WORKER_RUNTIME_UNEXPECTED_CONTROL_PLANE_H_
#define PSHARD_WORKER_RUNTIME_UNEXPECTED_CONTROL_PLANE_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

class UnexpectedControlPlane : public ControlPlane {
 public:
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest&, absl::Duration) override {
    return Unexpected("RegisterWorker");
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest&,
                                                  absl::Duration) override {
    return Unexpected("Heartbeat");
  }
  absl::Status KvPut(const v1::KvPutRequest&, absl::Duration) override {
    return Unexpected("KvPut");
  }
  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest&,
                                          absl::Duration) override {
    return Unexpected("KvGet");
  }
  absl::StatusOr<v1::KvGetManyResponse> KvGetMany(const v1::KvGetManyRequest&,
                                                  absl::Duration) override {
    return Unexpected("KvGetMany");
  }
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest&, absl::Duration) override {
    return Unexpected("ReportProgress");
  }
  absl::Status ReportResult(const v1::ReportResultRequest&,
                            absl::Duration) override {
    return Unexpected("ReportResult");
  }
  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest&, absl::Duration) override {
    return Unexpected("ReportCheckpoint");
  }
  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest&, absl::Duration) override {
    return Unexpected("ReportBuckets");
  }
  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest&, absl::Duration) override {
    return Unexpected("GetAssignment");
  }
  absl::StatusOr<std::unique_ptr<Attachment>> Attach(const v1::AttachRequest&,
                                                     absl::Duration) override {
    return Unexpected("Attach");
  }

 private:
  static absl::Status Unexpected(absl::string_view call) {
    ADD_FAILURE() << "unexpected ControlPlane call: " << call;
    return absl::UnimplementedError(absl::StrCat("unexpected call ", call));
  }
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_UNEXPECTED_CONTROL_PLANE_H_
