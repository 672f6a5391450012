// Coordinator facade tests: layout reports (full and by fingerprint), the layout barrier, assignment publication.
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST_F(CoordinatorTest, LayoutMismatchFailsTheJobNamingRankAndBucket) {
  Worker a = Register("a");
  Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2)));
  job = GetJob(job.id());
  Capture<Coordinator::AssignmentPtr> waiting;
  c_->GetAssignment(job.id(), job.epoch(), v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(60), waiting.Callback());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {10, 20, 30})));
  EXPECT_THAT(c_->ReportBuckets(Buckets(job, 1, {10, 21, 30})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 1 (worker w-2) differs from rank 0 at bucket 1")));
  job = GetJob(job.id());
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("at bucket 1"));
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_THAT(*waiting.result, StatusIs(absl::StatusCode::kAborted, ::testing::_));
}

TEST_F(CoordinatorTest, InvalidLayoutFailsTheJob) {
  Register("a");
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(1)));
  job = GetJob(job.id());
  auto req = Buckets(job, 0, {10});
  req.mutable_buckets(0)->mutable_parameters(0)->set_dtype("Q4");
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ReportLayoutComparesEncodingsThenFields) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto wire = [&](const v1::ReportBucketsRequest& req) {
    v1::ReportBucketsRequest only;
    *only.mutable_buckets() = req.buckets();
    return only.SerializeAsString();
  };
  auto report = [&](int rank, const std::string& bytes)
      -> absl::StatusOr<v1::ReportBucketsResponse> {
    Capture<v1::ReportBucketsResponse> got;
    c_->ReportLayout(LayoutReport(job, rank, EncodedLayout::FromEncoded(bytes),
                                  ""),
                     absl::InfinitePast(), got.Callback());
    if (!got.result.has_value()) return absl::InternalError("no answer");
    return *got.result;
  };
  const std::string reference = wire(Buckets(job, 0, {10, 20}));
  ASSERT_OK(report(0, reference));
  ASSERT_OK(report(1, reference));  // same bytes
  // Different bytes, same layout (an unknown field): accepted.
  v1::ReportBucketsRequest odd = Buckets(job, 2, {10, 20});
  odd.mutable_buckets(0)->GetReflection()
      ->MutableUnknownFields(odd.mutable_buckets(0))
      ->AddVarint(77, 1);
  ASSERT_NE(wire(odd), reference);
  ASSERT_OK(report(2, wire(odd)));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // Bytes that do not parse fail the job.
  EXPECT_THAT(report(3, std::string("\xff\xff\xff", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 3 (worker w-4) sent a bucket layout that "
                                 "does not parse")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ReportBucketsByFingerprint) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto by_fingerprint = [&](int rank, const std::vector<int64_t>& sizes) {
    v1::ReportBucketsRequest req = Buckets(job, rank, sizes);
    req.set_layout_fingerprint(shard::LayoutFingerprint(req.buckets()));
    req.clear_buckets();
    return c_->ReportBuckets(req);
  };
  // Nobody has sent the layout yet: rank 0 is asked for it.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r0, by_fingerprint(0, {10, 20}));
  EXPECT_TRUE(r0.send_layout());
  ASSERT_OK_AND_ASSIGN(r0, c_->ReportBuckets(Buckets(job, 0, {10, 20})));
  EXPECT_FALSE(r0.send_layout());
  // The same layout by fingerprint: accepted.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r1, by_fingerprint(1, {10, 20}));
  EXPECT_FALSE(r1.send_layout());
  // A wrong length is refused without failing the job.
  v1::ReportBucketsRequest short_fp = Buckets(job, 2, {10, 20});
  short_fp.clear_buckets();
  short_fp.set_layout_fingerprint("abc");
  EXPECT_THAT(c_->ReportBuckets(short_fp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layout_fingerprint: must be 32 bytes")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // A different layout's fingerprint is not taken on trust: send_layout, and
  // the full report then fails the job naming the rank and bucket.
  ASSERT_OK_AND_ASSIGN(v1::ReportBucketsResponse r2, by_fingerprint(2, {10, 21}));
  EXPECT_TRUE(r2.send_layout());
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  EXPECT_THAT(c_->ReportBuckets(Buckets(job, 2, {10, 21})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 2 (worker w-3) differs from rank 0 at bucket 1")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

// Ranks that report their fingerprint before anyone sent the layout wait for
// it; a wrong fingerprint is then asked for the layout, and a wait that runs
// out asks for it too.

TEST_F(CoordinatorTest, FingerprintReportsWaitForTheFirstFullLayout) {
  for (int i = 0; i < 4; ++i) Register(absl::StrCat("w", i));
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(4)));
  job = GetJob(job.id());
  auto park = [&](int rank, const std::vector<int64_t>& sizes,
                  absl::Duration wait, Capture<v1::ReportBucketsResponse>* got) {
    v1::ReportBucketsRequest req = Buckets(job, rank, sizes);
    c_->ReportLayout(LayoutReport(job, rank, EncodedLayout(),
                                  shard::LayoutFingerprint(req.buckets())),
                     clock_.Now() + wait, got->Callback());
  };
  Capture<v1::ReportBucketsResponse> same, other, late;
  park(1, {10, 20}, absl::Seconds(10), &same);
  park(2, {10, 99}, absl::Seconds(10), &other);
  park(3, {10, 20}, absl::Seconds(1), &late);
  EXPECT_FALSE(same.result.has_value());
  EXPECT_FALSE(other.result.has_value());
  // Rank 3's wait runs out: it is asked for the layout.
  clock_.Advance(absl::Seconds(2));
  c_->Tick();
  ASSERT_TRUE(late.result.has_value());
  ASSERT_OK(*late.result);
  EXPECT_TRUE((*late.result)->send_layout());
  EXPECT_FALSE(same.result.has_value());
  // Rank 0's full report answers the other two.
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {10, 20})));
  ASSERT_TRUE(same.result.has_value());
  ASSERT_OK(*same.result);
  EXPECT_FALSE((*same.result)->send_layout());
  ASSERT_TRUE(other.result.has_value());
  ASSERT_OK(*other.result);
  EXPECT_TRUE((*other.result)->send_layout());
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);
  // Ranks 2 and 3 report: rank 3 by fingerprint now, rank 2 in full.
  Capture<v1::ReportBucketsResponse> now;
  park(3, {10, 20}, absl::Seconds(1), &now);
  ASSERT_TRUE(now.result.has_value());
  ASSERT_OK(*now.result);
  EXPECT_FALSE((*now.result)->send_layout());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 2, {10, 20})));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, ParkedFingerprintReportIsAbortedWhenTheJobEnds) {
  v1::Job job = StartTwoRankJob();
  Capture<v1::ReportBucketsResponse> parked;
  v1::ReportBucketsRequest req = Buckets(job, 1, {10});
  c_->ReportLayout(LayoutReport(job, 1, EncodedLayout(),
                                shard::LayoutFingerprint(req.buckets())),
                   clock_.Now() + absl::Seconds(10), parked.Callback());
  EXPECT_FALSE(parked.result.has_value());
  ASSERT_OK(c_->CancelJob(job.id(), "test"));
  ASSERT_TRUE(parked.result.has_value());
  EXPECT_THAT(*parked.result, StatusIs(absl::StatusCode::kAborted,
                                       HasSubstr("CANCELLED")));
}

TEST_F(CoordinatorTest, FingerprintReportsCountTowardsTheAssignment) {
  v1::Job job = StartTwoRankJob();
  Capture<Coordinator::AssignmentPtr> owners;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_OWNERS,
                    clock_.Now() + absl::Seconds(30), owners.Callback());
  ASSERT_OK(c_->ReportBuckets(Buckets(job, 0, {100, 300, 200})));
  v1::ReportBucketsRequest req = Buckets(job, 1, {100, 300, 200});
  req.set_layout_fingerprint(shard::LayoutFingerprint(req.buckets()));
  req.clear_buckets();
  ASSERT_OK(c_->ReportBuckets(req));
  EXPECT_EQ(GetJob(job.id()).state(), v1::RUNNING);
  // The parked OWNERS waiter and a later one share the owners view.
  ASSERT_TRUE(owners.result.has_value());
  ASSERT_OK(*owners.result);
  const v1::ShardAssignment& view = ***owners.result;
  ASSERT_OK_AND_ASSIGN(v1::ShardAssignment full, c_->GetShardAssignment(job.id()));
  EXPECT_EQ(view.SerializeAsString(), shard::OwnersView(full).SerializeAsString());
  EXPECT_THAT(view.ranks(), SizeIs(0));
  Capture<Coordinator::AssignmentPtr> later;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_OWNERS,
                    clock_.Now() + absl::Seconds(1), later.Callback());
  ASSERT_TRUE(later.result.has_value());
  ASSERT_OK(*later.result);
  EXPECT_EQ(**later.result, **owners.result);  // the same shared message
  Capture<Coordinator::AssignmentPtr> unspecified;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_UNSPECIFIED,
                    clock_.Now() + absl::Seconds(1), unspecified.Callback());
  ASSERT_TRUE(unspecified.result.has_value());
  ASSERT_OK(*unspecified.result);
  EXPECT_EQ((**unspecified.result)->SerializeAsString(), full.SerializeAsString());
  Capture<Coordinator::AssignmentPtr> bad;
  c_->GetAssignment(job.id(), 1, static_cast<v1::AssignmentView>(9),
                    clock_.Now() + absl::Seconds(1), bad.Callback());
  ASSERT_TRUE(bad.result.has_value());
  EXPECT_THAT(*bad.result, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("view: unknown assignment view 9")));
}

TEST_F(CoordinatorTest, ReportBucketsBadInput) {
  v1::Job job = StartTwoRankJob();
  auto req = Buckets(job, 0, {10});
  req.set_job_id("job-404");
  EXPECT_THAT(c_->ReportBuckets(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  req = Buckets(job, 0, {10});
  req.set_epoch(job.epoch() + 1);
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unknown")));
  req = Buckets(job, 0, {10});
  req.set_rank(2);
  EXPECT_THAT(c_->ReportBuckets(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
  req = Buckets(job, 0, {10});
  req.set_worker_id(job.members(1).worker_id());
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("held by")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::STARTING);  // none of these fail it
}

TEST_F(CoordinatorTest, GetAssignmentErrors) {
  Capture<Coordinator::AssignmentPtr> none;
  c_->GetAssignment("job-1", 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), none.Callback());
  EXPECT_THAT(*none.result, StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(c_->GetShardAssignment("job-1"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job queued, c_->SubmitJob(Spec(1)));
  EXPECT_THAT(c_->GetShardAssignment(queued.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("QUEUED")));
  Register("a");
  v1::Job job = GetJob(queued.id());
  ASSERT_EQ(job.epoch(), 1);
  Capture<Coordinator::AssignmentPtr> stale;
  c_->GetAssignment(job.id(), 0, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), stale.Callback());
  EXPECT_THAT(*stale.result, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  Capture<Coordinator::AssignmentPtr> timeout;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now() + absl::Seconds(1), timeout.Callback());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_THAT(*timeout.result,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("0 of 1")));
  PublishLayout(job, {5});
  Capture<Coordinator::AssignmentPtr> now;
  c_->GetAssignment(job.id(), 1, v1::ASSIGNMENT_VIEW_FULL, clock_.Now(), now.Callback());
  EXPECT_OK(*now.result);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
