#include "worker/runtime/assignment_client.h"

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shard/layout_fingerprint.h"

namespace pshard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// The coordinator's side, scripted: records every request with its
// deadline and answers from queues (the default answers when they are
// empty). Time passes only when a GetAssignment answer says so.
class ScriptedRpcs : public AssignmentRpcs {
 public:
  explicit ScriptedRpcs(FakeClock* clock) : clock_(clock) {}

  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request,
      absl::Duration deadline) override {
    reports.push_back(request);
    report_deadlines.push_back(deadline);
    if (report_answers.empty()) return v1::ReportBucketsResponse();
    auto answer = std::move(report_answers.front());
    report_answers.pop_front();
    return answer;
  }

  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      absl::Duration deadline) override {
    gets.push_back(request);
    get_deadlines.push_back(deadline);
    if (get_answers.empty()) {
      // Not published within the request's wait.
      clock_->Advance(FromProto(request.timeout()));
      return absl::DeadlineExceededError("not yet");
    }
    auto answer = std::move(get_answers.front());
    get_answers.pop_front();
    return answer;
  }

  std::vector<v1::ReportBucketsRequest> reports;
  std::vector<absl::Duration> report_deadlines;
  std::deque<absl::StatusOr<v1::ReportBucketsResponse>> report_answers;
  std::vector<v1::GetAssignmentRequest> gets;
  std::vector<absl::Duration> get_deadlines;
  std::deque<absl::StatusOr<v1::ShardAssignment>> get_answers;

 private:
  FakeClock* const clock_;
};

std::vector<v1::BucketLayout> ThreeBuckets() {
  std::vector<v1::BucketLayout> buckets;
  for (int b = 0; b < 3; ++b) {
    v1::BucketLayout bucket;
    bucket.set_index(b);
    v1::BucketParameter* p = bucket.add_parameters();
    p->set_name(absl::StrCat("layer", b, ".weight"));
    p->set_num_elements(1024 * (b + 1));
    p->set_dtype("F32");
    buckets.push_back(bucket);
  }
  return buckets;
}

v1::ShardAssignment Owners(const std::string& job, int64_t epoch,
                           std::vector<int> owners) {
  v1::ShardAssignment assignment;
  assignment.set_job_id(job);
  assignment.set_epoch(epoch);
  for (size_t b = 0; b < owners.size(); ++b) {
    v1::BucketAssignment* bucket = assignment.add_buckets();
    bucket->set_index(static_cast<int>(b));
    bucket->set_owner_rank(owners[b]);
  }
  return assignment;
}

class AssignmentClientTest : public ::testing::Test {
 protected:
  AssignmentClientOptions Options(int rank) {
    AssignmentClientOptions options;
    options.job_id = "job-1";
    options.epoch = 3;
    options.rank = rank;
    options.world_size = 2;
    options.worker_id = absl::StrCat("w", rank);
    options.rpc_timeout = absl::Seconds(10);
    options.clock = &clock_;
    return options;
  }

  static absl::Status NotAborted() { return absl::OkStatus(); }

  FakeClock clock_;
  ScriptedRpcs rpcs_{&clock_};
};

TEST_F(AssignmentClientTest, RankZeroSendsItsLayoutAndReadsTheOwners) {
  AssignmentClient client(&rpcs_, Options(0));
  rpcs_.get_answers.push_back(Owners("job-1", 3, {1, 0, 1}));
  ASSERT_OK_AND_ASSIGN(
      BucketAssignment assignment,
      client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted));
  EXPECT_EQ(assignment.epoch, 3);
  EXPECT_THAT(assignment.owners, ElementsAre(1, 0, 1));

  ASSERT_THAT(rpcs_.reports, SizeIs(1));
  const v1::ReportBucketsRequest& report = rpcs_.reports[0];
  EXPECT_EQ(report.job_id(), "job-1");
  EXPECT_EQ(report.epoch(), 3);
  EXPECT_EQ(report.rank(), 0);
  EXPECT_EQ(report.worker_id(), "w0");
  EXPECT_THAT(report.buckets(), SizeIs(3));
  EXPECT_THAT(report.layout_fingerprint(), IsEmpty());
  EXPECT_THAT(rpcs_.report_deadlines, ElementsAre(absl::Seconds(10)));

  ASSERT_THAT(rpcs_.gets, SizeIs(1));
  EXPECT_EQ(rpcs_.gets[0].job_id(), "job-1");
  EXPECT_EQ(rpcs_.gets[0].epoch(), 3);
  EXPECT_EQ(rpcs_.gets[0].view(), v1::ASSIGNMENT_VIEW_OWNERS);
  EXPECT_EQ(FromProto(rpcs_.gets[0].timeout()), absl::Seconds(1));
  // The RPC deadline leaves the coordinator's wait its slack.
  EXPECT_THAT(rpcs_.get_deadlines, ElementsAre(absl::Seconds(11)));
}

TEST_F(AssignmentClientTest, OtherRanksSendOnlyTheFingerprintWhenItMatches) {
  AssignmentClient client(&rpcs_, Options(1));
  v1::ReportBucketsResponse matched;
  matched.set_send_layout(false);
  rpcs_.report_answers.push_back(matched);
  rpcs_.get_answers.push_back(Owners("job-1", 3, {1, 0, 1}));
  ASSERT_OK(client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted)
                .status());

  ASSERT_THAT(rpcs_.reports, SizeIs(1));
  const v1::ReportBucketsRequest& report = rpcs_.reports[0];
  EXPECT_EQ(report.rank(), 1);
  EXPECT_THAT(report.buckets(), IsEmpty());
  v1::ReportBucketsRequest full = LayoutReport(Options(1), ThreeBuckets());
  EXPECT_EQ(report.layout_fingerprint(),
            shard::LayoutFingerprint(full.buckets()));
  // The coordinator may hold it for rank 0's layout, within the deadline.
  EXPECT_EQ(FromProto(report.timeout()), absl::Seconds(5));
}

TEST_F(AssignmentClientTest, OtherRanksSendTheLayoutWhenAsked) {
  AssignmentClient client(&rpcs_, Options(1));
  v1::ReportBucketsResponse ask;
  ask.set_send_layout(true);
  rpcs_.report_answers.push_back(ask);
  rpcs_.get_answers.push_back(Owners("job-1", 3, {0, 0, 1}));
  ASSERT_OK_AND_ASSIGN(
      BucketAssignment assignment,
      client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted));
  EXPECT_THAT(assignment.owners, ElementsAre(0, 0, 1));

  ASSERT_THAT(rpcs_.reports, SizeIs(2));
  EXPECT_THAT(rpcs_.reports[0].buckets(), IsEmpty());
  EXPECT_THAT(rpcs_.reports[1].buckets(), SizeIs(3));
  EXPECT_THAT(rpcs_.reports[1].layout_fingerprint(), IsEmpty());
}

TEST_F(AssignmentClientTest, AFailedReportEndsTheExchange) {
  AssignmentClient client(&rpcs_, Options(0));
  rpcs_.report_answers.push_back(
      absl::InvalidArgumentError("layout differs from rank 0's"));
  EXPECT_THAT(client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("differs")));
  EXPECT_THAT(rpcs_.gets, IsEmpty());
}

TEST_F(AssignmentClientTest, WaitsInSlicesUntilTheAssignmentIsPublished) {
  AssignmentClient client(&rpcs_, Options(0));
  // Two slices run out; the third is answered.
  rpcs_.get_answers.push_back(absl::DeadlineExceededError("not yet"));
  rpcs_.get_answers.push_back(absl::UnavailableError("restarting"));
  rpcs_.get_answers.push_back(Owners("job-1", 3, {0, 1, 1}));
  clock_.set_advance_on_sleep(true);
  ASSERT_OK_AND_ASSIGN(
      BucketAssignment assignment,
      client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted));
  EXPECT_THAT(assignment.owners, ElementsAre(0, 1, 1));
  EXPECT_THAT(rpcs_.gets, SizeIs(3));
}

TEST_F(AssignmentClientTest, GivesUpAfterTheTimeout) {
  AssignmentClient client(&rpcs_, Options(0));
  EXPECT_THAT(
      client.Exchange(ThreeBuckets(), absl::Milliseconds(2500), NotAborted),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               "assignment of job job-1 epoch 3 not published within 2.5s"));
  ASSERT_THAT(rpcs_.gets, SizeIs(3));
  EXPECT_EQ(FromProto(rpcs_.gets[2].timeout()), absl::Milliseconds(500));
}

TEST_F(AssignmentClientTest, AnAbortEndsTheWait) {
  AssignmentClient client(&rpcs_, Options(0));
  int checks = 0;
  EXPECT_THAT(client.Exchange(ThreeBuckets(), absl::Minutes(5),
                              [&] {
                                return ++checks == 3
                                           ? absl::AbortedError("job aborted")
                                           : absl::OkStatus();
                              }),
              StatusIs(absl::StatusCode::kAborted, "job aborted"));
  EXPECT_THAT(rpcs_.gets, SizeIs(2));
}

TEST_F(AssignmentClientTest, RefusesAnotherEpochsAssignment) {
  AssignmentClient client(&rpcs_, Options(0));
  rpcs_.get_answers.push_back(Owners("job-1", 2, {0, 1, 1}));
  EXPECT_THAT(client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "refusing the assignment of job job-1 epoch 2: this "
                       "rank runs job job-1 epoch 3"));
}

TEST_F(AssignmentClientTest, RefusesOwnersOutsideTheWorld) {
  AssignmentClient client(&rpcs_, Options(0));
  rpcs_.get_answers.push_back(Owners("job-1", 3, {0, 2, 1}));
  EXPECT_THAT(client.Exchange(ThreeBuckets(), absl::Seconds(60), NotAborted),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "assignment gives bucket 1 to rank 2 of a 2-rank job"));
}

TEST(AssignmentRequestsTest, OnlyRankZeroSendsItsLayoutFirst) {
  EXPECT_TRUE(SendsLayoutFirst(0));
  EXPECT_FALSE(SendsLayoutFirst(1));
  EXPECT_FALSE(SendsLayoutFirst(4095));
}

}  // namespace
}  // namespace pshard::worker
