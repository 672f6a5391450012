// A stand-in for pshard-coordinator in pshardctl's own tests, so that
// `pshardctl local` can be tested without starting real workers: the real
// coordinator (tests/testing's InProcessCoordinator, serving on --listen)
// with --fake_workers simulated workers that run every job they are given
// (see InProcessCoordinator::RunPlacedJobs). Accepts the real binary's flags.
#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "common/port_file.h"
#include "security/server_access_flags.h"
#include "security/transport_flags.h"
#include "tests/testing/in_process_coordinator.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address to serve on.");
ABSL_FLAG(std::string, port_file, "", "Where to write the bound port.");
ABSL_FLAG(std::string, state_path, "", "The state database.");
ABSL_FLAG(int, fake_workers, 2, "Simulated workers to run jobs on.");

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::ParseCommandLine(argc, argv);

  pshard::testing::InProcessCoordinatorOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  // The --tls_* flags `pshardctl local` passes, so it is tested against a
  // TLS coordinator as it runs the real one.
  options.security = pshard::security::TransportSecurityFromFlags();
  options.state_path = absl::GetFlag(FLAGS_state_path);
  // The access files `pshardctl local` writes must load, but are not
  // enforced: the simulated workers call through an in-process channel with
  // no credential. tests/cli:local_e2e_test runs the real binaries with them.
  if (auto access = pshard::security::AccessPolicyFromFlags(options.security);
      !access.ok()) {
    std::cerr << access.status() << "\n";
    return 2;
  }
  auto coordinator = pshard::testing::InProcessCoordinator::Start(options);
  if (!coordinator.ok()) {
    std::cerr << coordinator.status() << "\n";
    return 1;
  }
  pshard::testing::InProcessCoordinator& c = **coordinator;
  if (absl::Status s =
          c.RegisterSimulatedWorkers(absl::GetFlag(FLAGS_fake_workers))
              .status();
      !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  std::cout << "fake coordinator serving on 127.0.0.1:" << c.port()
            << std::endl;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = pshard::WritePortFile(port_file, c.port()); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  // The simulated workers beat every 20 ms, as agents would.
  std::atomic<bool> stop{false};
  std::thread workers([&] {
    while (!stop.load()) {
      absl::StatusOr<std::vector<std::string>> ran = c.RunPlacedJobs();
      if (!ran.ok()) std::cerr << "simulated workers: " << ran.status() << "\n";
      pshard::Clock::Real().SleepFor(c.options().heartbeat_interval);
    }
  });
  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << "fake coordinator: signal " << sig << ", shutting down"
            << std::endl;
  stop.store(true);
  workers.join();
  return 0;
}
