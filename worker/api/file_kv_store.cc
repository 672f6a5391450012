#include "worker/api/file_kv_store.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pshard::worker {

namespace {

// Between two looks at the directory while a key is missing: short against
// a rendezvous (hundreds of ms), long against a stat.
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

}  // namespace

FileKvStore::FileKvStore(std::string directory, const Clock& clock)
    : directory_(std::move(directory)), clock_(clock) {}

std::string FileKvStore::PathOf(const std::string& key) const {
  std::string name;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&name, "%%%02X", c);
    }
  }
  return absl::StrCat(directory_, "/", name);
}

absl::Status FileKvStore::Put(const std::string& key,
                              const std::string& value) {
  const std::string path = PathOf(key);
  // Unique per writer, so two ranks putting the same key never share a
  // temporary file.
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.close();
    if (!out) {
      return absl::UnavailableError(
          absl::StrCat("cannot write the rendezvous file ", temp));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot rename ", temp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileKvStore::Get(const std::string& key,
                                             absl::Duration timeout) {
  const std::string path = PathOf(key);
  const absl::Time deadline = clock_.Now() + timeout;
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream value;
      value << in.rdbuf();
      return value.str();
    }
    if (clock_.Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("key \"", key, "\" did not appear in ", directory_,
                       " within ", absl::FormatDuration(timeout)));
    }
    clock_.SleepFor(kPollInterval);
  }
}

}  // namespace pshard::worker
