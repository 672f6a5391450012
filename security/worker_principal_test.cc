#include "security/worker_principal.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::security {
namespace {

using ::testing::HasSubstr;

TEST(WorkerPrincipalTest, ActsAsItselfAndItsLocalRanks) {
  EXPECT_TRUE(WorkerPrincipalMayActAs("p", "p"));
  EXPECT_TRUE(WorkerPrincipalMayActAs("p", "p:0"));
  EXPECT_TRUE(WorkerPrincipalMayActAs("p", "p:1"));
  EXPECT_TRUE(WorkerPrincipalMayActAs("p", "p:63"));
  EXPECT_EQ(LocalRankWorkerName("p", 7), "p:7");
  EXPECT_TRUE(WorkerPrincipalMayActAs("p", LocalRankWorkerName("p", 7)));
}

TEST(WorkerPrincipalTest, RefusesEverythingElse) {
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "q"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "q:1"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:x"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:1:2"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:01"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:64"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:100"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p:-1"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "p1"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p", "pp:1"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("p:1", "p:1:2"));
  EXPECT_FALSE(WorkerPrincipalMayActAs("", ":1"));
}

TEST(WorkerPrincipalTest, PrincipalNamesHaveNoColon) {
  EXPECT_THAT(ValidateWorkerPrincipalName("pshard-worker-0"), IsOk());
  EXPECT_THAT(ValidateWorkerPrincipalName("p:1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("':'")));
}

}  // namespace
}  // namespace pshard::security
