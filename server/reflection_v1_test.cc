#include "server/reflection_v1.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pshard/v1/job.grpc.pb.h"

namespace pshard::server {
namespace {

using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;
using ::testing::Contains;
using ::testing::HasSubstr;

std::vector<std::string> FileNames(const ServerReflectionResponse& response) {
  std::vector<std::string> names;
  for (const std::string& bytes :
       response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

// Over a real (in-process) server and stream, as grpcurl asks.
class ReflectionV1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = grpc::reflection::v1::ServerReflection::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }

  std::vector<ServerReflectionResponse> Ask(
      const std::vector<ServerReflectionRequest>& requests) {
    grpc::ClientContext context;
    auto stream = stub_->ServerReflectionInfo(&context);
    std::vector<ServerReflectionResponse> responses;
    for (const ServerReflectionRequest& request : requests) {
      EXPECT_TRUE(stream->Write(request));
      ServerReflectionResponse response;
      EXPECT_TRUE(stream->Read(&response));
      responses.push_back(response);
    }
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
    return responses;
  }

  ReflectionV1Service service_{{v1::JobService::service_full_name()}};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::reflection::v1::ServerReflection::Stub> stub_;
};

TEST_F(ReflectionV1Test, ListsTheServicesAndResolvesTheirFiles) {
  ServerReflectionRequest list;
  list.set_list_services("*");
  ServerReflectionRequest job_service;
  job_service.set_file_containing_symbol("pshard.v1.JobService");
  ServerReflectionRequest health;
  health.set_file_containing_symbol("grpc.health.v1.Health");
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("pshard/v1/job.proto");
  ServerReflectionRequest method;
  method.set_file_containing_symbol("pshard.v1.JobService.SubmitJob");
  const auto responses = Ask({list, job_service, health, by_name, method});

  std::vector<std::string> services;
  for (const auto& s : responses[0].list_services_response().service()) {
    services.push_back(s.name());
  }
  EXPECT_THAT(services, Contains("pshard.v1.JobService"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1.ServerReflection"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));

  // The file and what it imports (job_spec.proto, well-known types).
  EXPECT_EQ(FileNames(responses[1]).front(), "pshard/v1/job.proto");
  EXPECT_THAT(FileNames(responses[1]), Contains("pshard/v1/job_spec.proto"));
  EXPECT_THAT(FileNames(responses[1]),
              Contains("google/protobuf/timestamp.proto"));
  EXPECT_EQ(FileNames(responses[2]).front(), "grpc/health/v1/health.proto");
  EXPECT_EQ(FileNames(responses[3]).front(), "pshard/v1/job.proto");
  EXPECT_EQ(FileNames(responses[4]).front(), "pshard/v1/job.proto");
  EXPECT_EQ(responses[1].original_request().file_containing_symbol(),
            "pshard.v1.JobService");
}

TEST_F(ReflectionV1Test, UnknownNamesAreNotFoundOnTheSameStream) {
  ServerReflectionRequest missing;
  missing.set_file_containing_symbol("pshard.v1.NoSuchService");
  ServerReflectionRequest empty;
  ServerReflectionRequest list;
  list.set_list_services("");
  const auto responses = Ask({missing, empty, list});
  EXPECT_EQ(responses[0].error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(responses[0].error_response().error_message(),
              HasSubstr("pshard.v1.NoSuchService"));
  EXPECT_EQ(responses[1].error_response().error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_GT(responses[2].list_services_response().service_size(), 0);
}

}  // namespace
}  // namespace pshard::server
