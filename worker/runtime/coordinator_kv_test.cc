#include "worker/runtime/coordinator_kv.h"

#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/runtime/unexpected_control_plane.h"

namespace pshard::worker {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// A coordinator that answers each KvGetMany with the next scripted answer
// and records every request. A DeadlineExceeded answer first spends the
// request's slice on the fake clock, as the coordinator's wait would.
class ScriptedKvControlPlane : public UnexpectedControlPlane {
 public:
  explicit ScriptedKvControlPlane(FakeClock* clock) : clock_(clock) {}

  void Answer(absl::StatusOr<std::vector<std::string>> values) {
    answers_.push_back(std::move(values));
  }
  const std::vector<v1::KvGetManyRequest>& requests() const {
    return requests_;
  }

  absl::StatusOr<v1::KvGetManyResponse> KvGetMany(
      const v1::KvGetManyRequest& request, absl::Duration) override {
    requests_.push_back(request);
    if (answers_.empty()) {
      ADD_FAILURE() << "KvGetMany called more often than scripted";
      return absl::InternalError("no answer scripted");
    }
    absl::StatusOr<std::vector<std::string>> answer =
        std::move(answers_.front());
    answers_.pop_front();
    if (!answer.ok()) {
      if (absl::IsDeadlineExceeded(answer.status())) {
        clock_->Advance(FromProto(request.timeout()));
      }
      return answer.status();
    }
    v1::KvGetManyResponse response;
    for (std::string& value : *answer) response.add_values(std::move(value));
    return response;
  }

 private:
  FakeClock* const clock_;
  std::deque<absl::StatusOr<std::vector<std::string>>> answers_;
  std::vector<v1::KvGetManyRequest> requests_;
};

class CoordinatorKvClientTest : public ::testing::Test {
 protected:
  CoordinatorKvClientTest() { clock_.set_advance_on_sleep(true); }

  static std::vector<std::string> KeysOf(const v1::KvGetManyRequest& request) {
    return {request.keys().begin(), request.keys().end()};
  }

  FakeClock clock_;
  ScriptedKvControlPlane control_{&clock_};
  CoordinatorKvClient kv_{&control_, "job-1", 3, clock_};
};

TEST_F(CoordinatorKvClientTest, ReadsEveryKeyInOneCallScopedByJobAndEpoch) {
  control_.Answer(std::vector<std::string>{"va", "vb", "vc"});
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv_.GetMany(keys, absl::Seconds(30)));
  EXPECT_THAT(values, ElementsAre("va", "vb", "vc"));
  ASSERT_THAT(control_.requests(), SizeIs(1));
  EXPECT_EQ(control_.requests()[0].job_id(), "job-1");
  EXPECT_EQ(control_.requests()[0].epoch(), 3);
  EXPECT_THAT(KeysOf(control_.requests()[0]), ElementsAre("a", "b", "c"));
}

TEST_F(CoordinatorKvClientTest, AnAnswerCutAtTheByteCapIsFollowedByTheRest) {
  control_.Answer(std::vector<std::string>{"va"});
  control_.Answer(std::vector<std::string>{"vb", "vc"});
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv_.GetMany(keys, absl::Seconds(30)));
  EXPECT_THAT(values, ElementsAre("va", "vb", "vc"));
  ASSERT_THAT(control_.requests(), SizeIs(2));
  EXPECT_THAT(KeysOf(control_.requests()[1]), ElementsAre("b", "c"));
}

TEST_F(CoordinatorKvClientTest, ReadsMoreKeysThanOneCallMayCarryInChunks) {
  std::vector<std::string> keys;
  for (size_t i = 0; i <= CoordinatorKvClient::kMaxKeysPerRead; ++i) {
    keys.push_back(absl::StrCat("k", i));
  }
  control_.Answer(
      std::vector<std::string>(CoordinatorKvClient::kMaxKeysPerRead, "v"));
  control_.Answer(std::vector<std::string>{"last"});
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv_.GetMany(keys, absl::Seconds(30)));
  ASSERT_THAT(values, SizeIs(keys.size()));
  EXPECT_EQ(values.back(), "last");
  ASSERT_THAT(control_.requests(), SizeIs(2));
  EXPECT_EQ(static_cast<size_t>(control_.requests()[0].keys_size()),
            CoordinatorKvClient::kMaxKeysPerRead);
  EXPECT_THAT(KeysOf(control_.requests()[1]), ElementsAre(keys.back()));
}

TEST_F(CoordinatorKvClientTest, LongKeysAreSplitBeforeTheRequestGetsTooBig) {
  // 12,000 keys of 500 bytes: 6 MB of keys, over one request's 4 MiB.
  std::vector<std::string> keys;
  for (int i = 0; i < 12000; ++i) {
    std::string key = absl::StrCat("k", i, "/");
    key.resize(500, 'x');
    keys.push_back(std::move(key));
  }
  const size_t per_request =
      CoordinatorKvClient::kMaxKeyBytesPerRead / 500;  // 8388
  control_.Answer(std::vector<std::string>(per_request, "v"));
  control_.Answer(std::vector<std::string>(keys.size() - per_request, "w"));
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv_.GetMany(keys, absl::Seconds(30)));
  ASSERT_THAT(values, SizeIs(keys.size()));
  ASSERT_THAT(control_.requests(), SizeIs(2));
  EXPECT_EQ(static_cast<size_t>(control_.requests()[0].keys_size()),
            per_request);
  EXPECT_EQ(control_.requests()[1].keys(0), keys[per_request]);
  EXPECT_EQ(values[per_request], "w");
}

TEST_F(CoordinatorKvClientTest, WaitsInSlicesAndNamesTheKeyStillMissing) {
  for (int i = 0; i < 3; ++i) {
    control_.Answer(absl::DeadlineExceededError(
        "rendezvous key \"b\" did not appear before the deadline (1 of 2 "
        "keys read were present)"));
  }
  const std::vector<std::string> keys = {"a", "b"};
  EXPECT_THAT(kv_.GetMany(keys, absl::Seconds(3)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("job-1 epoch 3"),
                             HasSubstr("rendezvous key \"b\""),
                             HasSubstr("1 of 2 keys"))));
  // Three one-second slices, all within the one deadline.
  EXPECT_THAT(control_.requests(), SizeIs(3));
}

TEST_F(CoordinatorKvClientTest, AKeyThatAppearsInALaterSliceIsRead) {
  control_.Answer(absl::DeadlineExceededError("rendezvous key \"b\" ..."));
  control_.Answer(std::vector<std::string>{"va", "vb"});
  const std::vector<std::string> keys = {"a", "b"};
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> values,
                       kv_.GetMany(keys, absl::Seconds(30)));
  EXPECT_THAT(values, ElementsAre("va", "vb"));
}

TEST_F(CoordinatorKvClientTest, AnAnswerOfNoneOrTooManyValuesIsDataLoss) {
  const std::vector<std::string> keys = {"a", "b"};
  control_.Answer(std::vector<std::string>{});
  EXPECT_THAT(kv_.GetMany(keys, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("answered 0 values to a read of 2")));
  control_.Answer(std::vector<std::string>{"x", "y", "z"});
  EXPECT_THAT(kv_.GetMany(keys, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("answered 3 values to a read of 2")));
}

TEST_F(CoordinatorKvClientTest, OtherErrorsEndTheReadAsTheyAre) {
  control_.Answer(absl::PermissionDeniedError("not this job's rank"));
  const std::vector<std::string> keys = {"a"};
  EXPECT_THAT(kv_.GetMany(keys, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not this job's rank")));
}

TEST_F(CoordinatorKvClientTest, ACancelledClientMakesNoCall) {
  kv_.Cancel();
  const std::vector<std::string> keys = {"a"};
  EXPECT_THAT(kv_.GetMany(keys, absl::Seconds(30)),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled")));
  EXPECT_THAT(control_.requests(), SizeIs(0));
}

}  // namespace
}  // namespace pshard::worker
