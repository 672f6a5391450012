// make_certificates: a CA and certificates for a test cluster, through
// security::CertificateDirectory (what `pshardctl local` uses), for tests
// written in Python.
//
//   make_certificates --dir=D --names=pshard-coordinator,worker-0,pshardctl
//
// writes D/ca.{crt,key} and D/<name>.{crt,key} for each name.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "security/certificate_directory.h"

ABSL_FLAG(std::string, dir, "", "where the files go (created if missing)");
ABSL_FLAG(std::vector<std::string>, names, {},
          "comma-separated common names to issue certificates for");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_dir).empty()) {
    std::fprintf(stderr, "make_certificates: --dir is required\n");
    return 2;
  }
  auto certificates = pshard::security::CertificateDirectory::Create(
      absl::GetFlag(FLAGS_dir), "pshard test CA", absl::Now(), absl::Hours(24));
  if (!certificates.ok()) {
    std::fprintf(stderr, "make_certificates: %s\n",
                 certificates.status().ToString().c_str());
    return 1;
  }
  for (const std::string& name : absl::GetFlag(FLAGS_names)) {
    if (auto issued = certificates->Issue(name); !issued.ok()) {
      std::fprintf(stderr, "make_certificates: %s: %s\n", name.c_str(),
                   issued.status().ToString().c_str());
      return 1;
    }
  }
  return 0;
}
