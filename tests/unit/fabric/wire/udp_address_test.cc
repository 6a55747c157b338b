// UdpAddress's text forms (fabric/wire/udp_address.h): what logs and `softverbs status` print.
#include "fabric/wire/udp_address.h"

#include <gtest/gtest.h>

namespace softverbs::fabric::wire {
namespace {

TEST(UdpAddressTest, ToStringBracketsOnlyIpv6) {
  auto v4 = UdpAddress::Parse("10.77.0.1", 4791);
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->ToString(), "10.77.0.1:4791");
  auto v6 = UdpAddress::Parse("fd00::1", 49152);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->ToString(), "[fd00::1]:49152");
  EXPECT_EQ(v6->IpString(), "fd00::1");
}

}  // namespace
}  // namespace softverbs::fabric::wire
