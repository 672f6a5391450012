// Coordinator facade tests: idempotent submission (SubmitJob's request_id).
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

size_t NumJobs(Coordinator& c) {
  absl::StatusOr<Coordinator::JobPage> page = c.ListJobs({}, 1000, "");
  EXPECT_OK(page);
  return page.ok() ? page->jobs.size() : 0;
}

TEST_F(CoordinatorTest, SameRequestIdAndSpecIsOneJob) {
  ASSERT_OK_AND_ASSIGN(v1::Job first, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_EQ(first.request_id(), "req-1");
  ASSERT_OK_AND_ASSIGN(v1::Job again, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(NumJobs(*c_), 1u);
  // The retry added no event: the log still holds the one submission.
  EXPECT_THAT(Events(first.id()), SizeIs(1));
  // Another id, or none, is another job.
  ASSERT_OK_AND_ASSIGN(v1::Job other, c_->SubmitJob(Spec(2), "req-2"));
  EXPECT_NE(other.id(), first.id());
  ASSERT_OK_AND_ASSIGN(v1::Job plain1, c_->SubmitJob(Spec(2)));
  ASSERT_OK_AND_ASSIGN(v1::Job plain2, c_->SubmitJob(Spec(2)));
  EXPECT_NE(plain1.id(), plain2.id());
  EXPECT_TRUE(plain1.request_id().empty());
  EXPECT_EQ(NumJobs(*c_), 4u);
}

TEST_F(CoordinatorTest, RetryReturnsTheFirstJobAsItIsNow) {
  Worker a = Register("pod-a");
  ASSERT_OK_AND_ASSIGN(v1::Job first, c_->SubmitJob(Spec(1), "k8s-job-x"));
  ASSERT_EQ(first.state(), v1::STARTING);
  ASSERT_OK(c_->CancelJob(first.id(), ""));
  // Even an ended job is found: the retry must not run the work twice.
  ASSERT_OK_AND_ASSIGN(v1::Job again, c_->SubmitJob(Spec(1), "k8s-job-x"));
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(again.state(), v1::CANCELLED);
  EXPECT_EQ(NumJobs(*c_), 1u);
}

TEST_F(CoordinatorTest, SpecsAreComparedAfterDefaults) {
  v1::JobSpec spec = Spec(2);
  ASSERT_OK_AND_ASSIGN(v1::Job first, c_->SubmitJob(spec, "r"));
  // The same spec with a default spelled out is the same spec.
  spec.set_assignment_policy(first.spec().assignment_policy());
  ASSERT_OK_AND_ASSIGN(v1::Job again, c_->SubmitJob(spec, "r"));
  EXPECT_EQ(again.id(), first.id());
}

TEST_F(CoordinatorTest, SameRequestIdWithAnotherSpecIsAlreadyExists) {
  ASSERT_OK_AND_ASSIGN(v1::Job first, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_THAT(c_->SubmitJob(Spec(2, /*steps=*/11), "req-1"),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("request_id req-1 was used for job job-1 "
                                 "with a different spec")));
  EXPECT_EQ(NumJobs(*c_), 1u);
}

TEST_F(CoordinatorTest, RequestIdIsValidated) {
  for (const std::string& bad :
       {std::string(129, 'a'), std::string("has space"), std::string("a/b"),
        std::string("tab\there")}) {
    EXPECT_THAT(c_->SubmitJob(Spec(1), bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("request_id: must be at most 128 "
                                   "characters of [A-Za-z0-9._:-]")))
        << bad;
  }
  EXPECT_OK(c_->SubmitJob(Spec(1), std::string(128, 'a')));
  EXPECT_OK(c_->SubmitJob(Spec(1), "A-z_0.9:x"));
  EXPECT_EQ(NumJobs(*c_), 2u);
}

TEST_F(CoordinatorTest, RequestIdSurvivesACoordinatorRestart) {
  const std::string path = TempPath("state.db");
  Open(path);
  ASSERT_OK_AND_ASSIGN(v1::Job first, c_->SubmitJob(Spec(2), "req-1"));
  Open(path);  // a new coordinator on the same store
  ASSERT_OK_AND_ASSIGN(v1::Job again, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(again.request_id(), "req-1");
  EXPECT_THAT(c_->SubmitJob(Spec(3), "req-1"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("job-1")));
  EXPECT_EQ(NumJobs(*c_), 1u);
}

TEST_F(CoordinatorTest, ASubmissionThatDidNotCommitLeavesItsRequestIdFree) {
  FaultStateStore* faults = OpenWithFaults(TempPath("state.db"));
  ASSERT_NE(faults, nullptr);
  faults->FailCommits(1, absl::UnavailableError("disk full"));
  EXPECT_THAT(c_->SubmitJob(Spec(2), "req-1"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("disk full")));
  // Rolled back, the id names no job: the retry makes it.
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_EQ(job.request_id(), "req-1");
  ASSERT_OK_AND_ASSIGN(v1::Job again, c_->SubmitJob(Spec(2), "req-1"));
  EXPECT_EQ(again.id(), job.id());
  EXPECT_EQ(NumJobs(*c_), 1u);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
