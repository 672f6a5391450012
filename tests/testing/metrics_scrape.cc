#include "tests/testing/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pshard::testing {

absl::StatusOr<std::string> ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  absl::Cleanup close_fd = [fd] { close(fd); };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connecting to 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  const std::string request =
      "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept-Encoding: identity\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError(absl::StrCat("sending: ", std::strerror(errno)));
  }
  std::string response;
  char buffer[8192];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(std::strerror(errno));
    if (n == 0) break;
    response.append(buffer, n);
  }
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos || response.find(" 200 ") > response.find("\r\n")) {
    return absl::InternalError(absl::StrCat("response: ", response.substr(0, 200)));
  }
  return response.substr(body + 4);
}

absl::StatusOr<double> SampleValue(absl::string_view text,
                                   absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line, &value)) return value;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

}  // namespace pshard::testing
