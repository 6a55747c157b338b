#include "core/dm.h"

#include <cstring>

#include "core/device_limits.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class DmTest : public CoreTest {};

TEST_F(DmTest, AllocateChecksLengthAndAlignment) {
  EXPECT_EQ(DeviceMemory::Allocate(*context_, 0, 0).status().code(), EINVAL);
  EXPECT_EQ(DeviceMemory::Allocate(*context_, DeviceLimits::kMaxDmSize + 1, 0).status().code(), EINVAL);
  EXPECT_EQ(DeviceMemory::Allocate(*context_, 4096, 13).status().code(), EINVAL);
  auto dm = DeviceMemory::Allocate(*context_, DeviceLimits::kMaxDmSize, 12);
  ASSERT_TRUE(dm.ok()) << dm.status().rule();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*dm)->base()) % 4096, 0u);
}

// ibv_memcpy_to_dm / _from_dm: in bounds only (mlx5: EFAULT), never a byte outside.
TEST_F(DmTest, CopiesAreBounded) {
  auto dm = DeviceMemory::Allocate(*context_, 100, 0);
  ASSERT_TRUE(dm.ok());
  const char text[] = "device memory";
  ASSERT_TRUE((*dm)->CopyTo(87, text, 13).ok());
  char out[14] = {};
  ASSERT_TRUE((*dm)->CopyFrom(out, 87, 13).ok());
  EXPECT_STREQ(out, text);
  EXPECT_EQ((*dm)->CopyTo(88, text, 13).code(), EFAULT);
  EXPECT_EQ((*dm)->CopyTo(UINT64_MAX - 4, text, 8).code(), EFAULT);
  EXPECT_EQ((*dm)->CopyFrom(out, 100, 1).code(), EFAULT);
  EXPECT_EQ((*dm)->CheckRange(50, 51).code(), EINVAL);
  EXPECT_TRUE((*dm)->CheckRange(50, 50).ok());
}

// A DM MR is zero-based at any offset (no page translation to keep) and is not re-registered.
TEST_F(DmTest, ZeroBasedMrAtAnyOffset) {
  auto dm = DeviceMemory::Allocate(*context_, 4096, 0);
  ASSERT_TRUE(dm.ok());
  MrLayout l{reinterpret_cast<uint64_t>((*dm)->base()) + 12, 100, 0,
             access::kLocalWrite | access::kRemoteWrite | access::kZeroBased, true};
  auto mr = Mr::Register(*pd_, l);
  ASSERT_TRUE(mr.ok()) << mr.status().rule();
  EXPECT_EQ((*mr)->Reregister(rereg::kChangeAccess, nullptr, MrLayout{0, 0, 0, access::kLocalWrite}).code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::core
