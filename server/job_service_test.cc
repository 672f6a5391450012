// JobService over in-process gRPC: submit, get, list and cancel with their
// bad input, and WatchJob's streams (replay, errors, client cancel, the cap).
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/services_test_fixture.h"

namespace pshard {
namespace server {
namespace {

using ::testing::HasSubstr;

TEST_F(ServicesTest, SubmitGetListCancel) {
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(0);
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("world_size"));
  }
  {
    grpc::ClientContext ctx;
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, v1::SubmitJobRequest(), &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::Job job = Submit(2);
  EXPECT_EQ(job.id(), "job-1");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().assignment_policy(), v1::JobSpec::BALANCED);
  EXPECT_EQ(Get(job.id()).state(), v1::QUEUED);
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-99");
    v1::Job out;
    EXPECT_EQ(jobs_->GetJob(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(v1::QUEUED);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->ListJobs(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.jobs_size(), 1);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_limit(-3);
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(static_cast<v1::JobState>(42));
    v1::ListJobsResponse resp;
    EXPECT_EQ(jobs_->ListJobs(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Cancel(job.id(), std::string(2000, 'r')).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    v1::Job out;
    ASSERT_TRUE(Cancel(job.id(), "changed my mind", &out).ok());
    EXPECT_EQ(out.state(), v1::CANCELLED);
  }
  EXPECT_EQ(Cancel(job.id()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Cancel("nope").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServicesTest, WatchJobStreamsUntilTerminal) {
  v1::Job job = Submit(1);
  std::vector<v1::JobEvent> events;
  absl::Notification first;
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e)) {
      events.push_back(e);
      if (!first.HasBeenNotified()) first.Notify();
    }
    EXPECT_TRUE(reader->Finish().ok());
  });
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  Register("a");  // starts the job
  ASSERT_TRUE(Cancel(job.id()).ok());
  watcher.join();
  ASSERT_EQ(events.size(), 3u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence(), i + 1);
  EXPECT_EQ(events[1].state_change().to(), v1::STARTING);
  EXPECT_EQ(events[2].state_change().to(), v1::CANCELLED);

  // Replay from a sequence number on an ended job: the rest, then the end.
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  req.set_after_sequence(2);
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::JobEvent e;
  ASSERT_TRUE(reader->Read(&e));
  EXPECT_EQ(e.sequence(), 3);
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(ServicesTest, WatchJobErrorsAndClientCancel) {
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-404");
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-1");
    req.set_after_sequence(-1);
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::Job job = Submit(3);  // stays QUEUED: no workers
  // Clients that go away free their stream: with max_watchers = 4, ten
  // watch-and-leave rounds only pass if the server ends every stream. It
  // notices a cancel within one watch_poll; each round waits for that on the
  // service's count of open streams, then must get a stream at once.
  for (int round = 0; round < 10; ++round) {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    ASSERT_TRUE(reader->Read(&e))
        << "round " << round << ": " << reader->Finish().error_message();
    ctx.TryCancel();
    while (reader->Read(&e)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    ASSERT_TRUE(server_->job_service().AwaitOpenWatchersAtMost(
        0, absl::Seconds(10)))
        << "round " << round << ": the cancelled stream was not freed";
  }
}

TEST_F(ServicesTest, WatchJobIsCapped) {
  v1::Job job = Submit(3);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> readers;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    readers.push_back(jobs_->WatchJob(contexts.back().get(), req));
    v1::JobEvent e;
    ASSERT_TRUE(readers.back()->Read(&e));
  }
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::JobEvent e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) {
    while (r->Read(&e)) {
    }
    r->Finish();
  }
}

// Streams are counted per client host (the peer address without its port),
// under a higher cap over all clients. A second server on the same
// coordinator has the small caps; it is reached over TCP from 127.0.0.1
// and in process (another client).
TEST_F(ServicesTest, WatchJobIsCappedPerClientAndInAll) {
  v1::Job job = Submit(3);  // stays QUEUED: no workers
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tick_interval = absl::Milliseconds(10);
  options.services.max_watchers = 3;
  options.services.max_watchers_per_client = 2;
  options.services.watch_poll = absl::Milliseconds(100);
  options.security.insecure = true;  // loopback
  auto started = CoordinatorServer::Start(coordinator_.get(), &clock_, options);
  ASSERT_OK(started);
  std::unique_ptr<CoordinatorServer> server = *std::move(started);
  auto tcp = v1::JobService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                          grpc::InsecureChannelCredentials()));
  auto inproc = v1::JobService::NewStub(server->InProcessChannel());

  struct Stream {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
    bool first_read = false;
  };
  std::vector<Stream> streams;
  auto open = [&](v1::JobService::Stub& stub) -> Stream& {
    Stream s;
    s.ctx = std::make_unique<grpc::ClientContext>();
    v1::WatchJobRequest req;
    req.set_job_id(job.id());
    s.reader = stub.WatchJob(s.ctx.get(), req);
    v1::JobEvent e;
    s.first_read = s.reader->Read(&e);
    streams.push_back(std::move(s));
    return streams.back();
  };
  ASSERT_TRUE(open(*tcp).first_read);
  ASSERT_TRUE(open(*tcp).first_read);
  {
    Stream& third = open(*tcp);
    EXPECT_FALSE(third.first_read);
    const grpc::Status s = third.reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(),
                HasSubstr("too many WatchJob streams from 127.0.0.1 (2 per "
                          "client, max_watchers_per_client)"));
    third.reader.reset();
  }
  // Another client still gets one, up to the cap over all clients.
  ASSERT_TRUE(open(*inproc).first_read);
  {
    Stream& over = open(*inproc);
    EXPECT_FALSE(over.first_read);
    const grpc::Status s = over.reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(),
                HasSubstr("too many WatchJob streams (3, max_watchers)"));
    over.reader.reset();
  }
  for (Stream& s : streams) {
    if (s.reader == nullptr) continue;
    s.ctx->TryCancel();
    v1::JobEvent e;
    while (s.reader->Read(&e)) {
    }
    s.reader->Finish();
  }
  ASSERT_TRUE(server->job_service().AwaitOpenWatchersAtMost(
      0, absl::Seconds(10)));
  server->Shutdown(absl::Milliseconds(200));
}

}  // namespace
}  // namespace server
}  // namespace pshard
