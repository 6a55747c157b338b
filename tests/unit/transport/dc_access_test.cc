#include "transport/dc_access.h"

#include <gtest/gtest.h>

namespace softverbs::transport {
namespace {

struct Endpoint {
  Endpoint(bool dct, uint64_t key) {
    e.dct = dct;
    e.dc_access_key = key;
  }
  operator const QpEndpoint&() const { return e; }
  QpEndpoint e{};
};

DcDestination To(uint64_t key) {
  DcDestination d;
  d.set = true;
  d.access_key = key;
  return d;
}

TEST(DcAccess, DctAdmitsDcisWithItsKeyOnly) {
  const Endpoint dct(true, 42);
  EXPECT_TRUE(DcAdmits(dct, true, To(42)));
  EXPECT_FALSE(DcAdmits(dct, true, To(43)));
  EXPECT_FALSE(DcAdmits(dct, false, To(42)));  // an RC QP never reaches a DCT
}

TEST(DcAccess, DciReachesOnlyDcts) {
  EXPECT_FALSE(DcAdmits(Endpoint(false, 0), true, To(0)));
  EXPECT_TRUE(DcAdmits(Endpoint(false, 0), false, DcDestination{}));  // RC to RC: not DC's business
}

}  // namespace
}  // namespace softverbs::transport
