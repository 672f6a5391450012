#include "security/access_policy.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard::security {
namespace {

using ::testing::HasSubstr;
using ::testing::IsNull;
using ::testing::Not;
using ::testing::NotNull;

const std::string kAlice(40, 'a');
const std::string kOps(40, 'o');
constexpr char kSubmit[] = "/pshard.v1.JobService/SubmitJob";
constexpr char kDrain[] = "/pshard.v1.ClusterService/DrainWorker";
constexpr char kHealth[] = "/grpc.health.v1.Health/Check";

AccessPolicy Policy() {
  absl::StatusOr<TokenTable> tokens = TokenTable::Parse(
      kAlice + " alice submit\n" + TokenDigest(kOps) + " ops admin\n", "t");
  absl::StatusOr<IdentityTable> identities =
      IdentityTable::Parse("pshard-worker-0 worker\nviewer read\n", "i");
  EXPECT_OK(tokens.status());
  EXPECT_OK(identities.status());
  return AccessPolicy(*std::move(tokens), *std::move(identities),
                      AccessSettings{"/etc/pshard/tokens", "/etc/pshard/ids"});
}

TEST(AccessPolicyTest, TokensDecideOverCertificateNames) {
  const AccessPolicy policy = Policy();
  ASSERT_OK_AND_ASSIGN(const Principal* p,
                       policy.Authenticate("Bearer " + kAlice, {"viewer"}));
  ASSERT_THAT(p, NotNull());
  EXPECT_EQ(p->name, "alice");
  // A token given by its digest authenticates its token; the scheme is
  // case-insensitive.
  ASSERT_OK_AND_ASSIGN(p, policy.Authenticate("bearer " + kOps, {}));
  ASSERT_THAT(p, NotNull());
  EXPECT_EQ(p->name, "ops");
  ASSERT_OK_AND_ASSIGN(p, policy.Authenticate("", {"nobody", "viewer"}));
  ASSERT_THAT(p, NotNull());
  EXPECT_EQ(p->name, "viewer");
  ASSERT_OK_AND_ASSIGN(p, policy.Authenticate("", {}));
  EXPECT_THAT(p, IsNull());
}

TEST(AccessPolicyTest, AnUnknownTokenIsRefusedWithoutShowingIt) {
  const AccessPolicy policy = Policy();
  const std::string wrong(40, 'z');
  absl::StatusOr<const Principal*> p =
      policy.Authenticate("Bearer " + wrong, {"viewer"});
  EXPECT_THAT(p, StatusIs(absl::StatusCode::kUnauthenticated,
                          HasSubstr("not in /etc/pshard/tokens")));
  EXPECT_THAT(std::string(p.status().message()), Not(HasSubstr(wrong)));
  EXPECT_THAT(policy.Authenticate("Basic abc", {}),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("not \"Bearer TOKEN\"")));
  // The digest itself is no token.
  EXPECT_THAT(policy.Authenticate("Bearer " + TokenDigest(kOps), {}),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
}

TEST(AccessPolicyTest, ChecksRolesPerMethod) {
  const AccessPolicy policy = Policy();
  EXPECT_OK(policy.Check("Bearer " + kAlice, {}, kSubmit).status());
  EXPECT_THAT(policy.Check("Bearer " + kAlice, {}, kDrain),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("alice (roles: submit) may not call "
                                 "DrainWorker: it needs role admin")));
  EXPECT_OK(policy.Check("Bearer " + kOps, {}, kDrain).status());
  // Health needs nothing, even from a stranger.
  ASSERT_OK_AND_ASSIGN(const Principal* anonymous,
                       policy.Check("", {"stranger"}, kHealth));
  EXPECT_THAT(anonymous, IsNull());
  EXPECT_THAT(policy.Check("", {}, kSubmit),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("SubmitJob needs a credential with role "
                                 "submit")));
  EXPECT_THAT(policy.Check("", {"stranger"}, kSubmit),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("the client certificate's name \"stranger\" "
                                 "is not in /etc/pshard/ids")));
}

TEST(LoadServerAccessPolicyTest, RefusesAnOpenTlsServer) {
  TransportSecurity tls;
  tls.certificate_file = "c";
  tls.key_file = "k";
  EXPECT_THAT(LoadServerAccessPolicy({}, tls),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("without --auth_tokens, --auth_identities "
                                 "or --tls_require_client_cert")));
  EXPECT_THAT(LoadServerAccessPolicy({"", "ids"}, tls),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--auth_identities needs --tls_ca")));
  ASSERT_OK_AND_ASSIGN(auto none, LoadServerAccessPolicy({}, Plaintext()));
  EXPECT_THAT(none, IsNull());
  tls.ca_file = "ca";
  tls.require_client_certificate = true;
  ASSERT_OK_AND_ASSIGN(none, LoadServerAccessPolicy({}, tls));
  EXPECT_THAT(none, IsNull());
  EXPECT_THAT(LoadServerAccessPolicy({"/no/such/tokens", ""}, tls),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("--auth_tokens: ")));
}

TEST(ReadTokenFileTest, WantsOneToken) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    FILE* f = fopen(path.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
    return path;
  };
  ASSERT_OK_AND_ASSIGN(std::string token,
                       ReadTokenFile(write("one", kAlice + "\n"), "--t"));
  EXPECT_EQ(token, kAlice);
  EXPECT_THAT(ReadTokenFile(write("empty", " \n"), "--t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--t: ")));
  EXPECT_THAT(ReadTokenFile(write("two", "a b\n"), "--t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than one word")));
  EXPECT_THAT(ReadTokenFile(dir + "/missing", "--t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--t: ")));
}

}  // namespace
}  // namespace pshard::security
