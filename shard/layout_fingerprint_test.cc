#include "shard/layout_fingerprint.h"

#include "gtest/gtest.h"

namespace pshard {
namespace shard {
namespace {

TEST(LayoutFingerprintTest, IsSha256OfTheBytes) {
  // FIPS 180-2's test vector for "abc".
  const std::string fp = LayoutFingerprint(absl::string_view("abc"));
  ASSERT_EQ(fp.size(), kLayoutFingerprintBytes);
  static const unsigned char kAbc[] = {
      0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
      0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
      0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
  EXPECT_EQ(fp, std::string(reinterpret_cast<const char*>(kAbc), sizeof(kAbc)));
}

TEST(LayoutFingerprintTest, MessageFormMatchesTheWireFormAndTellsLayoutsApart) {
  v1::ReportBucketsRequest report;
  report.set_job_id("job-1");  // not part of the fingerprint
  report.set_rank(3);
  v1::BucketParameter* p = report.add_buckets()->add_parameters();
  p->set_name("w");
  p->set_num_elements(10);
  p->set_dtype("F32");
  v1::ReportBucketsRequest only;
  *only.mutable_buckets() = report.buckets();
  EXPECT_EQ(LayoutFingerprint(report.buckets()),
            LayoutFingerprint(only.SerializeAsString()));
  v1::ReportBucketsRequest other = report;
  other.mutable_buckets(0)->mutable_parameters(0)->set_num_elements(11);
  EXPECT_NE(LayoutFingerprint(report.buckets()),
            LayoutFingerprint(other.buckets()));
}

}  // namespace
}  // namespace shard
}  // namespace pshard
