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

TEST(DcAccess, DctAdmitsDcisWithItsKeyOnly) {
  const Endpoint dct(true, 42);
  EXPECT_TRUE(DcAdmits(dct, true, 42));
  EXPECT_FALSE(DcAdmits(dct, true, 43));
  EXPECT_FALSE(DcAdmits(dct, false, 42));  // an RC QP never reaches a DCT
}

TEST(DcAccess, DciReachesOnlyDcts) {
  EXPECT_FALSE(DcAdmits(Endpoint(false, 0), true, 0));
  EXPECT_TRUE(DcAdmits(Endpoint(false, 0), false, 0));  // RC to RC: not DC's business
}

}  // namespace
}  // namespace softverbs::transport
