// Reading a binary's Prometheus endpoint in a test: an HTTP GET of
// /metrics on loopback, and one sample's value out of the text format.
#ifndef PSHARD_TESTS_TESTING_METRICS_SCRAPE_H_
#define PSHARD_TESTS_TESTING_METRICS_SCRAPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::testing {

// The body of GET http://127.0.0.1:<port>/metrics. Unavailable when the
// connection fails; Internal for a status other than 200.
absl::StatusOr<std::string> ScrapeMetrics(int port);

// The value of the sample written exactly `series` (a name and its labels
// as the exposer prints them: `pshard_jobs{state="RUNNING"}`) in `text`.
// NotFound when absent.
absl::StatusOr<double> SampleValue(absl::string_view text,
                                   absl::string_view series);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_TESTING_METRICS_SCRAPE_H_
