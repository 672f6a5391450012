#include "security/tokens.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::security {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kAlice(40, 'a');
const std::string kOps(40, 'o');

TEST(TokenTableTest, MapsTokensToTheirPrincipals) {
  ASSERT_OK_AND_ASSIGN(
      TokenTable table,
      TokenTable::Parse("# comment\n\n" + kAlice + "  alice  submit\n" + kOps +
                            "\tops\tadmin,read\n",
                        "tokens"));
  EXPECT_EQ(table.size(), 2u);
  const Principal* alice = table.Authenticate(kAlice);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_THAT(alice->roles, ElementsAre(Role::kSubmit));
  const Principal* ops = table.Authenticate(kOps);
  ASSERT_NE(ops, nullptr);
  EXPECT_TRUE(ops->Has(Role::kAdmin));
  EXPECT_TRUE(ops->Has(Role::kRead));
  EXPECT_FALSE(ops->Has(Role::kWorker));
}

TEST(TokenTableTest, UnknownAndNearMissTokensAuthenticateNobody) {
  ASSERT_OK_AND_ASSIGN(TokenTable table,
                       TokenTable::Parse(kAlice + " alice submit\n", "t"));
  EXPECT_EQ(table.Authenticate(""), nullptr);
  EXPECT_EQ(table.Authenticate(kAlice.substr(1)), nullptr);
  EXPECT_EQ(table.Authenticate(kAlice + "a"), nullptr);
  std::string flipped = kAlice;
  flipped.back() = 'b';
  EXPECT_EQ(table.Authenticate(flipped), nullptr);
}

TEST(TokenTableTest, BadEntriesNameTheLineAndNeverTheToken) {
  EXPECT_THAT(TokenTable::Parse("\n" + kAlice + " alice\n", "/etc/t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/etc/t:2: want \"TOKEN NAME ROLE")));
  EXPECT_THAT(TokenTable::Parse(kAlice + " alice owner\n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t:1: unknown role \"owner\" (roles: read, "
                                 "submit, admin, worker)")));
  absl::StatusOr<TokenTable> short_token =
      TokenTable::Parse("tooshort alice submit\n", "t");
  EXPECT_THAT(short_token, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("shorter than 32")));
  EXPECT_THAT(std::string(short_token.status().message()),
              Not(HasSubstr("tooshort")));
  EXPECT_THAT(
      TokenTable::Parse(kAlice + " alice submit\n" + kAlice + " bob read\n",
                        "t"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("t:2: this token is already given")));
  EXPECT_THAT(
      TokenTable::Parse(kAlice + " alice submit\n" + kOps + " alice read\n",
                        "t"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("t:2: the name \"alice\" is already given")));
}

TEST(TokenTableTest, NewTokensAreLongDistinctHex) {
  ASSERT_OK_AND_ASSIGN(std::string a, NewToken());
  ASSERT_OK_AND_ASSIGN(std::string b, NewToken());
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(TokenTable table,
                       TokenTable::Parse(a + " x read\n", "t"));
  EXPECT_NE(table.Authenticate(a), nullptr);
}

TEST(TokenTableTest, TakesTokensByTheirDigest) {
  ASSERT_OK_AND_ASSIGN(
      TokenTable table,
      TokenTable::Parse(TokenDigest(kAlice) + " alice submit\n", "t"));
  EXPECT_NE(table.Authenticate(kAlice), nullptr);
  EXPECT_EQ(table.Authenticate(TokenDigest(kAlice)), nullptr);
  EXPECT_THAT(TokenTable::Parse("sha256:abc alice submit\n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t:1: a sha256: token needs 64 hex digits")));
  // A token and its digest are the same entry.
  EXPECT_THAT(TokenTable::Parse(kAlice + " alice submit\n" +
                                    TokenDigest(kAlice) + " bob read\n",
                                "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t:2: this token is already given")));
}

TEST(IdentityTableTest, MapsNamesToRoles) {
  ASSERT_OK_AND_ASSIGN(
      IdentityTable table,
      IdentityTable::Parse("# cn roles\npshard-worker-0 worker\nci "
                           "submit,read\n",
                           "ids"));
  EXPECT_EQ(table.size(), 2u);
  const Principal* ci = table.Find("ci");
  ASSERT_NE(ci, nullptr);
  EXPECT_THAT(ci->roles, ElementsAre(Role::kSubmit, Role::kRead));
  EXPECT_EQ(table.Find("pshard-worker-1"), nullptr);
  EXPECT_THAT(IdentityTable::Parse("ci\n", "ids"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ids:1: want \"NAME ROLE[,ROLE...]\", got "
                                 "1 field")));
  EXPECT_THAT(IdentityTable::Parse("ci read\nci admin\n", "ids"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ids:2: the name \"ci\" is given twice")));
}

TEST(TokenTableTest, WorkerPrincipalNamesHaveNoColon) {
  // "p:1" is what principal p may act as (a --local_ranks child); no
  // worker principal may be named so itself.
  EXPECT_THAT(TokenTable::Parse(kAlice + " p:1 worker\n", "t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t:1: a principal with role worker may not "
                                 "have ':'")));
  EXPECT_THAT(IdentityTable::Parse("p:1 read,worker\n", "ids"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ids:1: a principal with role worker")));
  // Other roles may.
  EXPECT_OK(TokenTable::Parse(kAlice + " ci:nightly submit\n", "t"));
  EXPECT_OK(IdentityTable::Parse("ci:nightly read\n", "ids"));
}

TEST(RoleTest, NamesRoundTrip) {
  for (Role role : {Role::kRead, Role::kSubmit, Role::kAdmin, Role::kWorker}) {
    ASSERT_OK_AND_ASSIGN(Role parsed, ParseRole(RoleName(role)));
    EXPECT_EQ(parsed, role);
  }
}

}  // namespace
}  // namespace pshard::security
