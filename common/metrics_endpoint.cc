#include "common/metrics_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/text_serializer.h"

namespace pshard {
namespace {

// A scrape's request head must arrive within this, and fit in this.
constexpr int kRequestTimeoutMs = 2000;
constexpr size_t kMaxRequestBytes = 8192;

void SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away
    data.remove_prefix(n);
  }
}

absl::Status ErrnoUnavailable(absl::string_view what, absl::string_view listen) {
  return absl::UnavailableError(absl::StrCat("metrics endpoint on ", listen,
                                             ": ", what, ": ",
                                             std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535 || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", listen,
        "\": want IPv4-address:port (port 0: any free port)"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoUnavailable("socket", listen);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status error = ErrnoUnavailable("bind", listen);
    close(fd);
    return error;
  }
  int stop[2];
  if (pipe2(stop, O_CLOEXEC) != 0) {
    absl::Status error = ErrnoUnavailable("pipe", listen);
    close(fd);
    return error;
  }
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(fd, ntohs(addr.sin_port), stop[0], stop[1]));
}

MetricsEndpoint::MetricsEndpoint(int listen_fd, int port, int stop_read,
                                 int stop_write)
    : listen_fd_(listen_fd),
      port_(port),
      stop_read_(stop_read),
      stop_write_(stop_write),
      registry_(std::make_shared<prometheus::Registry>()),
      thread_([this] { Serve(); }) {}

MetricsEndpoint::~MetricsEndpoint() {
  const char byte = 0;
  while (write(stop_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(listen_fd_);
  close(stop_read_);
  close(stop_write_);
}

void MetricsEndpoint::Add(std::shared_ptr<prometheus::Collectable> collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsEndpoint::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& collector : collectors_) {
      std::vector<prometheus::MetricFamily> more = collector->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void MetricsEndpoint::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

void MetricsEndpoint::Answer(int fd) const {
  // The request head, up to its blank line.
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos &&
         request.size() < kMaxRequestBytes) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, kRequestTimeoutMs) <= 0) return;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    request.append(buffer, n);
  }
  const bool get = absl::StartsWith(request, "GET ");
  const size_t path_end = request.find(' ', 4);
  const absl::string_view path =
      get && path_end != std::string::npos
          ? absl::string_view(request).substr(4, path_end - 4)
          : absl::string_view();
  if (path != "/metrics" && !absl::StartsWith(path, "/metrics?")) {
    SendAll(fd,
            "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
            "Connection: close\r\n\r\nnot found: the metrics are at /metrics\n");
    return;
  }
  const std::string body = Render();
  SendAll(fd, absl::StrCat("HTTP/1.0 200 OK\r\n"
                           "Content-Type: text/plain; version=0.0.4\r\n"
                           "Content-Length: ", body.size(), "\r\n"
                           "Connection: close\r\n\r\n"));
  SendAll(fd, body);
}

}  // namespace pshard
