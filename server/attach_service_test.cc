// WorkerControl.Attach over in-process gRPC (fast loss detection): a stream
// is accepted with one message and stays open; the client going away makes
// its worker LOST at once (the fixture's worker_timeout is 60 s); a replaced
// stream's end does not; bad requests are refused; the server's shutdown
// ends open streams promptly without making their workers LOST.
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/services_test_fixture.h"

namespace pshard {
namespace server {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

class AttachTest : public ServicesTest {
 protected:
  // An Attach call of the fixture's worker `id` (incarnation "inc").
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::AttachResponse>> reader;
  };

  std::unique_ptr<Call> Attach(const std::string& id,
                               const std::string& incarnation = "inc") {
    auto call = std::make_unique<Call>();
    v1::AttachRequest req;
    req.set_worker_id(id);
    req.set_incarnation(incarnation);
    call->reader = control_->Attach(&call->context, req);
    return call;
  }

  // Attaches and reads the acceptance.
  std::unique_ptr<Call> Accepted(const std::string& id) {
    std::unique_ptr<Call> call = Attach(id);
    v1::AttachResponse accepted;
    EXPECT_TRUE(call->reader->Read(&accepted))
        << call->reader->Finish().error_message();
    return call;
  }

  v1::WorkerState StateOf(const std::string& id) {
    auto w = coordinator_->GetWorker(id);
    return w.ok() ? w->state() : v1::WORKER_STATE_UNSPECIFIED;
  }
};

TEST_F(AttachTest, ClientGoingAwayMakesTheWorkerLostAtOnce) {
  const std::string a = Register("a");
  std::unique_ptr<Call> call = Accepted(a);
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(1, kWait));
  EXPECT_EQ(StateOf(a), v1::IDLE);

  call->context.TryCancel();
  EXPECT_EQ(call->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The stream's OnDone detached the worker before it left the open set.
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(0, kWait));
  EXPECT_EQ(StateOf(a), v1::LOST);
  grpc::ClientContext ctx;
  v1::HeartbeatRequest beat;
  beat.set_worker_id(a);
  beat.set_incarnation("inc");
  v1::HeartbeatResponse resp;
  EXPECT_EQ(control_->Heartbeat(&ctx, beat, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(AttachTest, BusyWorkerGoingAwayFailsItsJobNamingIt) {
  const std::string a = Register("a");
  const std::string b = Register("b");
  const v1::Job job = Submit(2);
  std::unique_ptr<Call> call = Accepted(b);
  call->context.TryCancel();
  (void)call->reader->Finish();
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(0, kWait));
  const v1::Job failed = Get(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.reason(),
              HasSubstr("worker " + b +
                        " (rank 1) lost: its connection to the coordinator "
                        "closed"));
  EXPECT_EQ(StateOf(a), v1::IDLE);
}

TEST_F(AttachTest, ReplacedStreamEndingLeavesTheWorkerAlone) {
  const std::string a = Register("a");
  std::unique_ptr<Call> first = Accepted(a);
  std::unique_ptr<Call> second = Accepted(a);
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(2, kWait));
  first->context.TryCancel();
  (void)first->reader->Finish();
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(1, kWait));
  EXPECT_EQ(StateOf(a), v1::IDLE);
  second->context.TryCancel();
  (void)second->reader->Finish();
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(0, kWait));
  EXPECT_EQ(StateOf(a), v1::LOST);
}

TEST_F(AttachTest, BadRequestsAreRefused) {
  const std::string a = Register("a");
  struct Case {
    std::string id, incarnation;
    grpc::StatusCode code;
    std::string message;
  };
  for (const Case& c : {
           Case{"", "inc", grpc::StatusCode::INVALID_ARGUMENT, "worker_id"},
           Case{a, "", grpc::StatusCode::INVALID_ARGUMENT, "incarnation"},
           Case{"w-99", "inc", grpc::StatusCode::NOT_FOUND, "is unknown"},
           Case{a, "old", grpc::StatusCode::NOT_FOUND, "newer incarnation"},
       }) {
    std::unique_ptr<Call> call = Attach(c.id, c.incarnation);
    v1::AttachResponse accepted;
    EXPECT_FALSE(call->reader->Read(&accepted)) << c.message;
    const grpc::Status status = call->reader->Finish();
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(server_->attach_streams().AwaitOpen(0, kWait));
  EXPECT_EQ(StateOf(a), v1::IDLE);
}

TEST_F(AttachTest, ShutdownEndsOpenStreamsWithoutLosingTheirWorkers) {
  const std::string a = Register("a");
  const std::string b = Register("b");
  std::unique_ptr<Call> call_a = Accepted(a);
  std::unique_ptr<Call> call_b = Accepted(b);
  ASSERT_TRUE(server_->attach_streams().AwaitOpen(2, kWait));
  // A grace far longer than the bound below: streams left open would hold
  // Shutdown for all of it.
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (Call* call : {call_a.get(), call_b.get()}) {
    const grpc::Status status = call->reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
  }
  // The coordinator outlives its server; the workers are not lost.
  EXPECT_EQ(StateOf(a), v1::IDLE);
  EXPECT_EQ(StateOf(b), v1::IDLE);
}

}  // namespace
}  // namespace server
}  // namespace pshard
