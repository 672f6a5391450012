#include "security/rpc_roles.h"

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "google/protobuf/descriptor.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::security {
namespace {

using ::testing::HasSubstr;

Principal With(std::string name, std::vector<Role> roles) {
  return Principal{std::move(name), std::move(roles)};
}

TEST(RpcRolesTest, HealthAndReflectionAreOpenToAnyone) {
  EXPECT_OK(Authorize(nullptr, "/grpc.health.v1.Health/Check"));
  EXPECT_OK(Authorize(nullptr, "/grpc.reflection.v1.ServerReflection/"
                               "ServerReflectionInfo"));
  EXPECT_OK(Authorize(nullptr, "/grpc.reflection.v1alpha.ServerReflection/"
                               "ServerReflectionInfo"));
}

TEST(RpcRolesTest, NoCredentialIsUnauthenticatedNamingWhatToSend) {
  EXPECT_THAT(Authorize(nullptr, "/pshard.v1.JobService/GetJob"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("GetJob needs a credential with role read: "
                                 "a bearer token (pshardctl --token_file")));
}

// Every role against every RPC: allowed and denied.
TEST(RpcRolesTest, EveryRoleAgainstEveryMethod) {
  const Principal read = With("dash", {Role::kRead});
  const Principal submit = With("alice", {Role::kSubmit});
  const Principal admin = With("ops", {Role::kAdmin});
  const Principal worker = With("pool", {Role::kWorker});
  struct Case {
    const char* method;
    bool read, submit, admin, worker;
  };
  const Case cases[] = {
      {"/pshard.v1.JobService/SubmitJob", false, true, true, false},
      {"/pshard.v1.JobService/CancelJob", false, true, true, false},
      {"/pshard.v1.JobService/GetJob", true, true, true, false},
      {"/pshard.v1.JobService/ListJobs", true, true, true, false},
      {"/pshard.v1.JobService/WatchJob", true, true, true, false},
      {"/pshard.v1.ShardService/GetShardAssignment", true, true, true, false},
      {"/pshard.v1.ClusterService/ListWorkers", true, true, true, false},
      {"/pshard.v1.ClusterService/GetWorker", true, true, true, false},
      {"/pshard.v1.ClusterService/DrainWorker", false, false, true, false},
      {"/pshard.v1.ClusterService/UndrainWorker", false, false, true, false},
      {"/pshard.v1.WorkerStatus/GetStatus", true, true, true, false},
      {"/pshard.v1.WorkerStatus/StreamLogs", true, true, true, false},
      {"/pshard.v1.WorkerControl/RegisterWorker", false, false, false, true},
      {"/pshard.v1.WorkerControl/Heartbeat", false, false, false, true},
      {"/pshard.v1.WorkerControl/KvPut", false, false, false, true},
      {"/pshard.v1.WorkerControl/KvGet", false, false, false, true},
      {"/pshard.v1.WorkerControl/KvGetMany", false, false, false, true},
      {"/pshard.v1.WorkerControl/ReportBuckets", false, false, false, true},
      {"/pshard.v1.WorkerControl/GetAssignment", false, false, false, true},
      {"/pshard.v1.WorkerControl/ReportProgress", false, false, false, true},
      {"/pshard.v1.WorkerControl/ReportResult", false, false, false, true},
      {"/pshard.v1.WorkerControl/ReportCheckpoint", false, false, false, true},
      {"/pshard.v1.WorkerControl/Attach", false, false, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method);
    EXPECT_EQ(Authorize(&read, c.method).ok(), c.read);
    EXPECT_EQ(Authorize(&submit, c.method).ok(), c.submit);
    EXPECT_EQ(Authorize(&admin, c.method).ok(), c.admin);
    EXPECT_EQ(Authorize(&worker, c.method).ok(), c.worker);
  }
}

TEST(RpcRolesTest, DeniedSaysWhoWhatAndWhichRoleIsNeeded) {
  const Principal alice = With("alice", {Role::kSubmit});
  EXPECT_THAT(Authorize(&alice, "/pshard.v1.ClusterService/DrainWorker"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       "alice (roles: submit) may not call DrainWorker: it "
                       "needs role admin"));
}

// A new RPC in the protos fails here until it has a rule.
TEST(RpcRolesTest, EveryMethodOfThePshardServicesHasARule) {
  // Linking the generated code registers the files in the generated pool.
  (void)v1::JobService::service_full_name();
  (void)v1::ShardService::service_full_name();
  (void)v1::ClusterService::service_full_name();
  (void)v1::WorkerControl::service_full_name();
  (void)v1::WorkerStatus::service_full_name();
  int methods = 0;
  for (const char* name :
       {"pshard.v1.JobService", "pshard.v1.ShardService",
        "pshard.v1.ClusterService", "pshard.v1.WorkerControl",
        "pshard.v1.WorkerStatus"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string full =
          absl::StrCat("/", name, "/", service->method(i)->name());
      EXPECT_OK(RequiredRole(full).status()) << full;
      ++methods;
    }
  }
  EXPECT_EQ(methods, 23);
}

TEST(RpcRolesTest, AnUnknownMethodIsClosed) {
  const Principal admin = With("ops", {Role::kAdmin});
  EXPECT_THAT(Authorize(&admin, "/pshard.v1.JobService/DeleteEverything"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("no access rule for "
                                 "/pshard.v1.JobService/DeleteEverything")));
  EXPECT_THAT(Authorize(&admin, "/other.Service/Method"),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
}

}  // namespace
}  // namespace pshard::security
