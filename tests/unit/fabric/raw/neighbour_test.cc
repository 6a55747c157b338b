#include "fabric/raw/neighbour.h"

#include <gtest/gtest.h>

#include <chrono>

namespace softverbs::fabric::raw {
namespace {

GidBytes Gid(std::initializer_list<uint8_t> head, std::initializer_list<uint8_t> tail = {}) {
  GidBytes g{};
  size_t i = 0;
  for (uint8_t b : head) g[i++] = b;
  i = 16 - tail.size();
  for (uint8_t b : tail) g[i++] = b;
  return g;
}

GidBytes V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) { return Gid({}, {0xff, 0xff, a, b, c, d}); }

TEST(NeighbourTest, Ipv4FamilyFollowsRdmaCore) {
  EXPECT_TRUE(GidIsIpv4(V4(10, 0, 0, 1)));
  EXPECT_TRUE(GidIsIpv4(Gid({0xff, 0x0e}, {0xff, 0xff, 239, 1, 2, 3})));  // IPv4 multicast encoding
  EXPECT_FALSE(GidIsIpv4(Gid({0xfe, 0x80}, {1})));
  EXPECT_FALSE(GidIsIpv4(Gid({0xff, 0x0e}, {0xfe, 0xff, 239, 1, 2, 3})));
}

TEST(NeighbourTest, Ipv4MulticastKeepsTheLow23Bits) {
  auto mac = MacEncodedInGid(V4(239, 129, 2, 3));  // the 0x80 bit of the second byte is dropped
  ASSERT_TRUE(mac);
  EXPECT_EQ(*mac, (MacBytes{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  mac = MacEncodedInGid(Gid({0xff, 0x0e}, {0xff, 0xff, 224, 0, 0, 251}));
  ASSERT_TRUE(mac);
  EXPECT_EQ(*mac, (MacBytes{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}));
}

TEST(NeighbourTest, Ipv6MulticastIs3333AndTheLastFourBytes) {
  auto mac = MacEncodedInGid(Gid({0xff, 0x02}, {0xff, 0x12, 0x34, 0x56}));
  ASSERT_TRUE(mac);
  EXPECT_EQ(*mac, (MacBytes{0x33, 0x33, 0xff, 0x12, 0x34, 0x56}));
}

TEST(NeighbourTest, LinkLocalGivesTheMacOfItsEui64) {
  // fe80::0211:22ff:fe33:4455 is the link-local address of 00:11:22:33:44:55.
  auto mac = MacEncodedInGid(Gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}));
  ASSERT_TRUE(mac);
  EXPECT_EQ(*mac, (MacBytes{0x00, 0x11, 0x22, 0x33, 0x44, 0x55}));
}

TEST(NeighbourTest, OrdinaryAddressesNeedTheNetwork) {
  EXPECT_FALSE(MacEncodedInGid(V4(10, 66, 0, 2)));
  EXPECT_FALSE(MacEncodedInGid(V4(223, 255, 255, 255)));
  EXPECT_FALSE(MacEncodedInGid(Gid({0x20, 0x01, 0x0d, 0xb8}, {1})));
  EXPECT_FALSE(MacEncodedInGid(Gid({0xfe, 0x80, 0, 0, 0, 0, 0, 1}, {1})));  // fe80::/64 only, as neigh.c
}

TEST(NeighbourTest, SourceGidNoInterfaceHoldsIsEinval) {
  // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no interface holds it.
  Result<L2Address> r = ResolveL2(V4(192, 0, 2, 77), V4(192, 0, 2, 78), std::chrono::milliseconds(100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::fabric::raw
