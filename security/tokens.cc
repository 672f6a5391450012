#include "security/tokens.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"
#include "security/worker_principal.h"

namespace pshard::security {
namespace {

constexpr std::pair<Role, absl::string_view> kRoleNames[] = {
    {Role::kRead, "read"},
    {Role::kSubmit, "submit"},
    {Role::kAdmin, "admin"},
    {Role::kWorker, "worker"},
};

// SHA-256 of `bytes` into `digest` (a stack buffer: this runs on every
// call); its size, or 0 on failure, which EVP_Digest reports only when an
// allocation fails. An empty digest matches no stored token.
size_t Sha256Into(absl::string_view bytes, unsigned char (&digest)[32]) {
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(),
                 nullptr) != 1) {
    return 0;
  }
  return size;
}

std::string Sha256Of(absl::string_view bytes) {
  unsigned char digest[32];
  const size_t size = Sha256Into(bytes, digest);
  return std::string(reinterpret_cast<const char*>(digest), size);
}

constexpr absl::string_view kDigestPrefix = "sha256:";

// Roles "a,b" of a principal named `name`; `where` wraps a problem with the
// line it is on.
template <typename Where>
absl::StatusOr<Principal> ParsePrincipal(absl::string_view name,
                                         absl::string_view roles,
                                         const Where& where) {
  Principal principal;
  principal.name = std::string(name);
  for (absl::string_view role_name : absl::StrSplit(roles, ',')) {
    absl::StatusOr<Role> role = ParseRole(role_name);
    if (!role.ok()) return where(role.status().message());
    if (!principal.Has(*role)) principal.roles.push_back(*role);
  }
  // "P:1" is a name principal P may act as (worker_principal.h): no
  // principal of its own may have it.
  if (principal.Has(Role::kWorker)) {
    if (absl::Status valid = ValidateWorkerPrincipalName(principal.name);
        !valid.ok()) {
      return where(valid.message());
    }
  }
  return principal;
}

// Calls `entry(fields, where)` for each entry line of `text`.
template <typename Entry>
absl::Status ForEachEntry(absl::string_view text, absl::string_view source,
                          const Entry& entry) {
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto where = [&](absl::string_view problem) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": ", problem));
    };
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    RETURN_IF_ERROR(entry(fields, where));
  }
  return absl::OkStatus();
}

std::string FieldCount(size_t n) {
  return absl::StrCat(n, n == 1 ? " field" : " fields");
}

}  // namespace

absl::string_view RoleName(Role role) {
  for (const auto& [r, name] : kRoleNames) {
    if (r == role) return name;
  }
  return "?";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (const auto& [role, role_name] : kRoleNames) {
    if (name == role_name) return role;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown role \"", absl::CHexEscape(name),
      "\" (roles: read, submit, admin, worker)"));
}

bool Principal::Has(Role role) const {
  for (Role r : roles) {
    if (r == role) return true;
  }
  return false;
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text,
                                             absl::string_view source) {
  TokenTable table;
  std::set<std::string> names;
  RETURN_IF_ERROR(ForEachEntry(
      text, source,
      [&](const std::vector<absl::string_view>& fields,
          const auto& where) -> absl::Status {
        if (fields.size() != 3) {
          return where(absl::StrCat("want \"TOKEN NAME ROLE[,ROLE...]\", got ",
                                    FieldCount(fields.size())));
        }
        // The token itself never goes into a message.
        std::string digest;
        if (absl::StartsWith(fields[0], kDigestPrefix)) {
          const absl::string_view hex = fields[0].substr(kDigestPrefix.size());
          if (hex.size() != 64 ||
              hex.find_first_not_of("0123456789abcdefABCDEF") !=
                  absl::string_view::npos) {
            return where("a sha256: token needs 64 hex digits");
          }
          digest = absl::HexStringToBytes(hex);
        } else if (fields[0].size() < kMinTokenBytes) {
          return where(absl::StrCat("the token is shorter than ",
                                    kMinTokenBytes, " characters"));
        } else {
          digest = Sha256Of(fields[0]);
        }
        ASSIGN_OR_RETURN(Principal principal,
                         ParsePrincipal(fields[1], fields[2], where));
        if (!names.insert(principal.name).second) {
          return where(absl::StrCat("the name \"", principal.name,
                                    "\" is already given to another token"));
        }
        if (!table.by_digest_.emplace(digest, std::move(principal)).second) {
          return where("this token is already given to another entry");
        }
        return absl::OkStatus();
      }));
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text,
                   checkpoint::ReadSmallFile(path, int64_t{1} << 20));
  return Parse(text, path);
}

const Principal* TokenTable::Authenticate(absl::string_view token) const {
  if (token.empty()) return nullptr;
  unsigned char digest[32];
  const size_t size = Sha256Into(token, digest);
  if (size == 0) return nullptr;
  auto it = by_digest_.find(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
  return it == by_digest_.end() ? nullptr : &it->second;
}

std::string TokenDigest(absl::string_view token) {
  return absl::StrCat(kDigestPrefix, absl::BytesToHexString(Sha256Of(token)));
}

absl::StatusOr<IdentityTable> IdentityTable::Parse(absl::string_view text,
                                                   absl::string_view source) {
  IdentityTable table;
  RETURN_IF_ERROR(ForEachEntry(
      text, source,
      [&](const std::vector<absl::string_view>& fields,
          const auto& where) -> absl::Status {
        if (fields.size() != 2) {
          return where(absl::StrCat("want \"NAME ROLE[,ROLE...]\", got ",
                                    FieldCount(fields.size())));
        }
        ASSIGN_OR_RETURN(Principal principal,
                         ParsePrincipal(fields[0], fields[1], where));
        if (!table.by_name_.emplace(principal.name, principal).second) {
          return where(absl::StrCat("the name \"", principal.name,
                                    "\" is given twice"));
        }
        return absl::OkStatus();
      }));
  return table;
}

absl::StatusOr<IdentityTable> IdentityTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text,
                   checkpoint::ReadSmallFile(path, int64_t{1} << 20));
  return Parse(text, path);
}

const Principal* IdentityTable::Find(absl::string_view common_name) const {
  auto it = by_name_.find(common_name);
  return it == by_name_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("no randomness for a token (RAND_bytes)");
  }
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace pshard::security
