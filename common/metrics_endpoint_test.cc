#include "common/metrics_endpoint.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "tests/testing/metrics_scrape.h"

namespace pshard {
namespace {

using ::testing::HasSubstr;

// A collector that computes its family at each scrape.
class Answers : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = "test_answers";
    family.help = "answers";
    family.type = prometheus::MetricType::Gauge;
    family.metric.emplace_back();
    family.metric.back().label = {{"kind", "everything"}};
    family.metric.back().gauge.value = ++scrapes_ * 42;
    return {family};
  }

 private:
  mutable int scrapes_ = 0;
};

TEST(MetricsEndpointTest, ServesItsRegistryAndCollectorsOnAnyFreePort) {
  ASSERT_OK_AND_ASSIGN(auto endpoint, MetricsEndpoint::Start("127.0.0.1:0"));
  ASSERT_GT(endpoint->port(), 0);
  prometheus::BuildCounter()
      .Name("test_total")
      .Help("a counter")
      .Register(endpoint->registry())
      .Add({{"code", "OK"}})
      .Increment(3);
  endpoint->Add(std::make_shared<Answers>());
  ASSERT_OK_AND_ASSIGN(std::string text, testing::ScrapeMetrics(endpoint->port()));
  EXPECT_EQ(testing::SampleValue(text, R"(test_total{code="OK"})").value_or(-1), 3);
  EXPECT_EQ(testing::SampleValue(text, R"(test_answers{kind="everything"})").value_or(-1), 42);
  ASSERT_OK_AND_ASSIGN(text, testing::ScrapeMetrics(endpoint->port()));
  EXPECT_EQ(testing::SampleValue(text, R"(test_answers{kind="everything"})").value_or(-1), 84);
}

TEST(MetricsEndpointTest, BadOrTakenAddressesAreErrors) {
  EXPECT_THAT(MetricsEndpoint::Start("no-port"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want IPv4-address:port")));
  ASSERT_OK_AND_ASSIGN(auto first, MetricsEndpoint::Start("127.0.0.1:0"));
  EXPECT_THAT(
      MetricsEndpoint::Start(absl::StrCat("127.0.0.1:", first->port())),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("metrics endpoint")));
  EXPECT_THAT(MetricsEndpoint::Start("example.com:9100"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("IPv4")));
}

}  // namespace
}  // namespace pshard
