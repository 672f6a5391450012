#include "coordinator/worker_registry.h"

#include <string>
#include <vector>

#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::RegisterWorkerRequest Request(const std::string& name,
                                  const std::string& host = "h1") {
  v1::RegisterWorkerRequest req;
  req.set_name(name);
  req.set_incarnation("inc-1");
  req.set_host(host);
  req.set_device_kind(v1::CPU);
  return req;
}

WorkerRec* AddAndRegister(WorkerRegistry& registry, const std::string& name,
                          absl::Time now, const std::string& host = "h1") {
  absl::StatusOr<WorkerRec*> w = registry.Add(name, now);
  EXPECT_OK(w);
  if (!w.ok()) return nullptr;
  registry.Register(**w, Request(name, host), now);
  return *w;
}

TEST(WorkerRegistryTest, ValidationNamesTheField) {
  EXPECT_OK(WorkerRegistry::ValidateRegistration(Request("a.b_c:d-1")));
  v1::RegisterWorkerRequest req = Request("bad name");
  EXPECT_THAT(WorkerRegistry::ValidateRegistration(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name:")));
  req = Request("a");
  req.set_incarnation("");
  EXPECT_THAT(WorkerRegistry::ValidateRegistration(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("incarnation:")));
  req = Request("a");
  req.set_device_kind(static_cast<v1::DeviceKind>(77));
  EXPECT_THAT(WorkerRegistry::ValidateRegistration(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("device_kind: unknown value 77")));
}

TEST(WorkerRegistryTest, AddNumbersResolveFindsByIdThenNameAndIsCapped) {
  WorkerRegistry registry({/*max_workers=*/2}, kT0);
  WorkerRec* a = AddAndRegister(registry, "a", kT0);
  WorkerRec* b = AddAndRegister(registry, "w-1", kT0);  // a name like an id
  EXPECT_EQ(a->info.id(), "w-1");
  EXPECT_EQ(b->info.id(), "w-2");
  EXPECT_EQ(registry.FindByName("a"), a);
  ASSERT_OK_AND_ASSIGN(WorkerRec * by_id, registry.Resolve("w-1"));
  EXPECT_EQ(by_id, a);  // an id wins over another worker's name
  ASSERT_OK_AND_ASSIGN(WorkerRec * by_name, registry.Resolve("a"));
  EXPECT_EQ(by_name, a);
  EXPECT_THAT(registry.Resolve("nobody"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"nobody\"")));
  EXPECT_THAT(registry.Add("c", kT0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("worker registry full (2)")));
}

TEST(WorkerRegistryTest, StateAndInfoAreDerivedFromTheRecord) {
  WorkerRegistry registry({}, kT0);
  WorkerRec* w = AddAndRegister(registry, "a", kT0);
  EXPECT_EQ(WorkerRegistry::StateOf(*w), v1::IDLE);
  w->Assign(3, 2, 1);
  v1::WorkerInfo info = WorkerRegistry::InfoOf(*w, kT0 + absl::Seconds(2));
  EXPECT_EQ(info.state(), v1::BUSY);
  EXPECT_EQ(info.job_id(), "job-3");
  EXPECT_EQ(info.rank(), 1);
  EXPECT_EQ(FromProto(info.heartbeat_age()), absl::Seconds(2));
  EXPECT_TRUE(w->Holds(3, 2));
  EXPECT_FALSE(w->Holds(3, 1));
  w->info.set_drain_requested(true);
  EXPECT_EQ(WorkerRegistry::StateOf(*w), v1::DRAINING);
  w->lost = true;
  EXPECT_EQ(WorkerRegistry::StateOf(*w), v1::LOST);
  w->Release();
  EXPECT_EQ(WorkerRegistry::InfoOf(*w, kT0).rank(), -1);
}

TEST(WorkerRegistryTest, IdleSkipsBusyDrainingLostAndUnconfirmedWorkers) {
  WorkerRegistry registry({}, kT0);
  AddAndRegister(registry, "idle", kT0, "hx");
  AddAndRegister(registry, "busy", kT0)->Assign(1, 1, 0);
  AddAndRegister(registry, "drained", kT0)->info.set_drain_requested(true);
  AddAndRegister(registry, "lost", kT0)->lost = true;
  v1::WorkerInfo stored;
  stored.set_id("w-9");
  stored.set_name("unconfirmed");
  registry.Restore(9, stored, kT0);
  std::vector<IdleWorker> idle = registry.Idle(kT0);
  ASSERT_THAT(idle, SizeIs(1));
  EXPECT_EQ(idle[0].num, 1);
  EXPECT_EQ(idle[0].host, "hx");
}

TEST(WorkerRegistryTest, LossesAreDueAfterTheTimeoutOrTheRecoveryGrace) {
  WorkerRegistryOptions options;
  options.worker_timeout = absl::Seconds(5);
  options.recovery_grace = absl::Seconds(10);
  WorkerRegistry registry(options, kT0);
  v1::WorkerInfo stored;
  stored.set_id("w-1");
  stored.set_name("old");
  registry.Restore(1, stored, kT0);
  WorkerRec* fresh = AddAndRegister(registry, "fresh", kT0);
  EXPECT_EQ(fresh->info.id(), "w-2");  // numbering continues after Restore
  // The first check scans; then none until the earliest limit.
  EXPECT_THAT(registry.DueLosses(kT0), IsEmpty());
  EXPECT_THAT(registry.DueLosses(kT0 + absl::Seconds(5)), IsEmpty());
  std::vector<WorkerRegistry::Loss> lost =
      registry.DueLosses(kT0 + absl::Seconds(6));
  ASSERT_THAT(lost, SizeIs(1));
  EXPECT_EQ(lost[0].worker, fresh);
  EXPECT_THAT(lost[0].why, HasSubstr("no heartbeat for 6s"));
  lost[0].worker->lost = true;
  lost = registry.DueLosses(kT0 + absl::Seconds(11));
  ASSERT_THAT(lost, SizeIs(1));
  EXPECT_EQ(lost[0].worker->info.id(), "w-1");
  EXPECT_THAT(lost[0].why,
              HasSubstr("not back within 10s of a coordinator restart"));
}

TEST(WorkerRegistryTest, ListPagesInIdOrderAndHidesLostWorkers) {
  WorkerRegistry registry({}, kT0);
  for (const char* name : {"a", "b", "c"}) AddAndRegister(registry, name, kT0);
  registry.Find(2)->lost = true;
  ASSERT_OK_AND_ASSIGN(WorkerPage first, registry.List(false, 1, "", kT0));
  ASSERT_THAT(first.workers, SizeIs(1));
  EXPECT_EQ(first.workers[0].id(), "w-1");
  ASSERT_OK_AND_ASSIGN(WorkerPage rest,
                       registry.List(false, 5, first.next_page_token, kT0));
  ASSERT_THAT(rest.workers, SizeIs(1));
  EXPECT_EQ(rest.workers[0].id(), "w-3");
  EXPECT_THAT(rest.next_page_token, IsEmpty());
  EXPECT_THAT(registry.List(true, 5, first.next_page_token, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token")));
  ASSERT_OK_AND_ASSIGN(WorkerPage all, registry.List(true, 0, "", kT0));
  EXPECT_THAT(all.workers, SizeIs(3));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
