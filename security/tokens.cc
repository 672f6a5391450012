#include "security/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"

namespace pshard::security {
namespace {

constexpr std::pair<Role, absl::string_view> kRoleNames[] = {
    {Role::kRead, "read"},
    {Role::kSubmit, "submit"},
    {Role::kAdmin, "admin"},
    {Role::kWorker, "worker"},
};

std::array<uint8_t, 32> Sha256Of(absl::string_view bytes) {
  std::array<uint8_t, 32> digest{};
  unsigned int size = 0;
  // EVP_Digest cannot fail for SHA-256 on a memory buffer short of an
  // allocation failure; a zero digest then matches no stored token.
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size,
                 EVP_sha256(), nullptr) != 1) {
    digest.fill(0);
  }
  return digest;
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
  std::set<std::array<uint8_t, 32>> tokens;
  std::set<std::string> names;
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
    if (fields.size() != 3) {
      return where(absl::StrCat(
          "want \"TOKEN NAME ROLE[,ROLE...]\", got ", fields.size(),
          fields.size() == 1 ? " field" : " fields"));
    }
    // The token itself never goes into a message.
    if (fields[0].size() < kMinTokenBytes) {
      return where(absl::StrCat("the token is shorter than ", kMinTokenBytes,
                                " characters"));
    }
    Entry entry;
    entry.token_sha256 = Sha256Of(fields[0]);
    entry.principal.name = std::string(fields[1]);
    for (absl::string_view role_name : absl::StrSplit(fields[2], ',')) {
      absl::StatusOr<Role> role = ParseRole(role_name);
      if (!role.ok()) return where(role.status().message());
      if (!entry.principal.Has(*role)) entry.principal.roles.push_back(*role);
    }
    if (!tokens.insert(entry.token_sha256).second) {
      return where("this token is already given to another entry");
    }
    if (!names.insert(entry.principal.name).second) {
      return where(absl::StrCat("the name \"", entry.principal.name,
                                "\" is already given to another token"));
    }
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text,
                   checkpoint::ReadSmallFile(path, int64_t{1} << 20));
  return Parse(text, path);
}

const Principal* TokenTable::Authenticate(absl::string_view token) const {
  const std::array<uint8_t, 32> presented = Sha256Of(token);
  const Principal* found = nullptr;
  // Every entry, every time: the loop's length does not depend on where (or
  // whether) the token matches.
  for (const Entry& entry : entries_) {
    const bool match = CRYPTO_memcmp(presented.data(),
                                     entry.token_sha256.data(),
                                     presented.size()) == 0;
    if (match) found = &entry.principal;
  }
  return found;
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
