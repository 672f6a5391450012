#include "checkpoint/catalog.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file.h"
#include "common/status_macros.h"

namespace pshard::checkpoint {
namespace {

// Removes a step directory: the manifest first (so the checkpoint stops
// counting), then the shards, then the directory.
absl::Status RemoveStepDirectory(const std::string& dir) {
  const std::string manifest = absl::StrCat(dir, "/", kManifestFileName);
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("cannot remove", manifest, errno);
  }
  RETURN_IF_ERROR(FsyncDirectory(dir));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("cannot list", dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("cannot remove", path, errno);
    }
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("cannot remove directory", dir, errno);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(
    const std::string& root) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    return ErrnoError("cannot list checkpoint directory", root, errno);
  }
  while (dirent* e = ::readdir(d)) {
    const int64_t step = ParseStepDirectoryName(e->d_name);
    if (step < 0) continue;
    struct stat st;
    const std::string path = StepDirectory(root, step);
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      steps.push_back(step);
    }
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<CompleteCheckpoint> LatestCompleteCheckpoint(
    const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(root));
  CompleteCheckpoint result;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string dir = StepDirectory(root, *it);
    auto manifest = VerifyCheckpoint(dir);
    if (manifest.ok()) {
      result.step_dir = dir;
      result.manifest = *std::move(manifest);
      return result;
    }
    result.skipped.push_back(std::string(manifest.status().message()));
  }
  if (result.skipped.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint under ", root));
  }
  return absl::NotFoundError(
      absl::StrCat("no complete checkpoint under ", root, ": ",
                   absl::StrJoin(result.skipped, "; ")));
}

absl::StatusOr<CompleteCheckpoint> ResolveCheckpoint(const std::string& path) {
  struct stat st;
  const std::string manifest = absl::StrCat(path, "/", kManifestFileName);
  if (::stat(manifest.c_str(), &st) != 0) return LatestCompleteCheckpoint(path);
  CompleteCheckpoint result;
  result.step_dir = path;
  ASSIGN_OR_RETURN(result.manifest, VerifyCheckpoint(path));
  return result;
}

absl::StatusOr<std::vector<std::string>> Prune(const std::string& root,
                                               int keep_last) {
  if (keep_last < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_last ", keep_last, " must be at least 1"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(root));
  // Walk from the newest; once keep_last complete ones are found, everything
  // older goes.
  int complete = 0;
  size_t first_removed = steps.size();
  for (size_t i = steps.size(); i-- > 0;) {
    if (VerifyCheckpoint(StepDirectory(root, steps[i])).ok() &&
        ++complete == keep_last) {
      first_removed = i;
      break;
    }
  }
  std::vector<std::string> removed;
  if (first_removed == steps.size()) return removed;
  for (size_t i = 0; i < first_removed; ++i) {
    const std::string dir = StepDirectory(root, steps[i]);
    RETURN_IF_ERROR(RemoveStepDirectory(dir));
    removed.push_back(dir);
  }
  if (!removed.empty()) RETURN_IF_ERROR(FsyncDirectory(root));
  return removed;
}

}  // namespace pshard::checkpoint
