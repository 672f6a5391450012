// A stand-in for pshard-coordinator in pshardctl's own tests: serves
// FakeCoordinator (auto_run, with --fake_workers idle workers) and accepts
// the real binary's flags, so `pshardctl local` can be tested without the
// real coordinator and workers.
#include <signal.h>

#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/fake_coordinator.h"
#include "common/port_file.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address to serve on.");
ABSL_FLAG(std::string, port_file, "", "Where to write the bound port.");
ABSL_FLAG(std::string, state_path, "", "Ignored.");
ABSL_FLAG(int, fake_workers, 2, "Idle workers to report.");

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::ParseCommandLine(argc, argv);

  pshard::cli::FakeCoordinator::Options options;
  options.auto_run = true;
  options.idle_workers = absl::GetFlag(FLAGS_fake_workers);
  pshard::cli::FakeCoordinator fake(options);
  absl::StatusOr<std::string> address = fake.Start(absl::GetFlag(FLAGS_listen));
  if (!address.ok()) {
    std::cerr << address.status() << "\n";
    return 1;
  }
  std::cout << "fake coordinator serving on " << *address << std::endl;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    int port = 0;
    absl::Status written =
        absl::SimpleAtoi(address->substr(address->rfind(':') + 1), &port)
            ? pshard::WritePortFile(port_file, port)
            : absl::InternalError(absl::StrCat("no port in ", *address));
    if (!written.ok()) {
      std::cerr << written << "\n";
      return 1;
    }
  }
  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << "fake coordinator: signal " << sig << ", shutting down"
            << std::endl;
  fake.Shutdown();
  return 0;
}
