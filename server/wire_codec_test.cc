#include "server/wire_codec.h"

#include <string>

#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace pshard {
namespace server {
namespace wire {
namespace {

using ::google::protobuf::util::MessageDifferencer;

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("codec");
  spec.set_world_size(4);
  spec.set_steps(7);
  spec.mutable_synthetic()->set_num_parameters(1000);
  return spec;
}

std::string Join(const std::vector<std::optional<std::string>>& pieces,
                 const std::string& tail) {
  std::string out;
  for (const auto& p : pieces) out += p.has_value() ? *p : tail;
  return out;
}

TEST(WireCodecTest, FieldNumbersAreThoseOfTheGeneratedCode) {
  EXPECT_EQ(kHeartbeatResponseDirectives,
            v1::HeartbeatResponse::kDirectivesFieldNumber);
  EXPECT_EQ(kHeartbeatResponseJobCheckpointStep,
            v1::HeartbeatResponse::kJobCheckpointStepFieldNumber);
  // EncodeHeartbeatResponse writes these two: a new field needs writing too.
  EXPECT_EQ(v1::HeartbeatResponse::descriptor()->field_count(), 2);
  EXPECT_EQ(kDirectiveRunJob, v1::Directive::kRunJobFieldNumber);
  EXPECT_EQ(kRunJobDirectiveSpec, v1::RunJobDirective::kSpecFieldNumber);
  EXPECT_EQ(kReportBucketsJobId, v1::ReportBucketsRequest::kJobIdFieldNumber);
  EXPECT_EQ(kReportBucketsEpoch, v1::ReportBucketsRequest::kEpochFieldNumber);
  EXPECT_EQ(kReportBucketsRank, v1::ReportBucketsRequest::kRankFieldNumber);
  EXPECT_EQ(kReportBucketsWorkerId,
            v1::ReportBucketsRequest::kWorkerIdFieldNumber);
  EXPECT_EQ(kReportBucketsBuckets,
            v1::ReportBucketsRequest::kBucketsFieldNumber);
  EXPECT_EQ(kReportBucketsLayoutFingerprint,
            v1::ReportBucketsRequest::kLayoutFingerprintFieldNumber);
  EXPECT_EQ(kReportBucketsTimeout,
            v1::ReportBucketsRequest::kTimeoutFieldNumber);
}

TEST(WireCodecTest, HeartbeatWithASharedSpecParsesAsTheFullResponse) {
  v1::HeartbeatResponse response;
  auto* abort = response.add_directives()->mutable_abort_job();
  abort->set_job_id("job-1");
  abort->set_epoch(2);
  auto* run = response.add_directives()->mutable_run_job();
  run->set_job_id("job-3");
  run->set_epoch(1);
  run->set_rank(2);
  run->set_world_size(4);
  response.set_job_checkpoint_step(1200);
  const std::string tail = EncodeRunJobSpecTail(Spec());
  const auto pieces = EncodeHeartbeatResponse(response, tail.size());
  ASSERT_EQ(pieces.size(), 4u);  // abort, RunJob head, tail, the step
  EXPECT_FALSE(pieces[2].has_value());

  v1::HeartbeatResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Join(pieces, tail)));
  v1::HeartbeatResponse want = response;
  *want.mutable_directives(1)->mutable_run_job()->mutable_spec() = Spec();
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, want))
      << parsed.DebugString();
}

TEST(WireCodecTest, HeartbeatWithoutASharedSpecIsWrittenWhole) {
  v1::HeartbeatResponse response;
  auto* run = response.add_directives()->mutable_run_job();
  run->set_job_id("job-3");
  *run->mutable_spec() = Spec();
  response.add_directives()->mutable_drain();
  const auto pieces = EncodeHeartbeatResponse(response, std::nullopt);
  ASSERT_EQ(pieces.size(), 2u);
  v1::HeartbeatResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Join(pieces, "")));
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, response));
  // No directives: no bytes (an empty message).
  EXPECT_TRUE(EncodeHeartbeatResponse(v1::HeartbeatResponse(), 10).empty());
}

v1::ReportBucketsRequest Report() {
  v1::ReportBucketsRequest req;
  req.set_job_id("job-9");
  req.set_epoch(3);
  req.set_rank(5);
  req.set_worker_id("w-12");
  for (int i = 0; i < 3; ++i) {
    v1::BucketLayout* b = req.add_buckets();
    b->set_index(i);
    v1::BucketParameter* p = b->add_parameters();
    p->set_name("t" + std::to_string(i));
    p->set_num_elements(100 * (i + 1));
    p->set_dtype("F32");
  }
  req.set_layout_fingerprint(std::string(32, 'f'));
  *req.mutable_timeout() = ToProto(absl::Milliseconds(1500));
  return req;
}

TEST(WireCodecTest, ReportBucketsDecodesEveryFieldAndKeepsTheLayoutEncoded) {
  const v1::ReportBucketsRequest req = Report();
  ASSERT_OK_AND_ASSIGN(ReportBucketsFrame frame,
                       DecodeReportBucketsRequest(req.SerializeAsString()));
  EXPECT_EQ(frame.report.job_id, "job-9");
  EXPECT_EQ(frame.report.epoch, 3);
  EXPECT_EQ(frame.report.rank, 5);
  EXPECT_EQ(frame.report.worker_id, "w-12");
  EXPECT_EQ(frame.report.fingerprint, std::string(32, 'f'));
  EXPECT_EQ(FromProto(frame.timeout), absl::Milliseconds(1500));
  // The bytes as the generated serializer writes the buckets alone.
  EXPECT_TRUE(frame.report.layout ==
              coordinator::EncodedLayout::FromBuckets(req.buckets()));
  ASSERT_OK_AND_ASSIGN(coordinator::EncodedLayout::Buckets buckets,
                       frame.report.layout.Decode());
  ASSERT_EQ(buckets.size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(buckets[i], req.buckets(i)));
  }
}

TEST(WireCodecTest, ReportBucketsEdgeCases) {
  v1::ReportBucketsRequest req;
  req.set_job_id("job-1");
  req.set_rank(-4);
  ASSERT_OK_AND_ASSIGN(ReportBucketsFrame frame,
                       DecodeReportBucketsRequest(req.SerializeAsString()));
  EXPECT_EQ(frame.report.rank, -1);  // outside int32 as a varint
  EXPECT_TRUE(frame.report.layout.empty());
  EXPECT_EQ(FromProto(frame.timeout), absl::ZeroDuration());
  // Unknown fields are skipped.
  std::string bytes = Report().SerializeAsString();
  bytes += std::string("\x98\x06\x01", 3);  // field 99, varint 1
  ASSERT_OK_AND_ASSIGN(frame, DecodeReportBucketsRequest(bytes));
  EXPECT_EQ(frame.report.worker_id, "w-12");
  // Truncated input does not parse.
  const std::string full = Report().SerializeAsString();
  EXPECT_THAT(DecodeReportBucketsRequest(full.substr(0, full.size() - 40)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("does not parse")));
}

}  // namespace
}  // namespace wire
}  // namespace server
}  // namespace pshard
