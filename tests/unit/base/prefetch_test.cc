#include "base/prefetch.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

namespace softverbs {
namespace {

// DirectRoute asks for lines from a hint that may be stale: any address must be harmless.
TEST(PrefetchTest, AnyAddressIsHarmless) {
  const uintptr_t wild[] = {0, 0xdead0000u, 0x8000000000000000ull /* not canonical on x86-64 */,
                            ~uintptr_t{63}};
  for (uintptr_t a : wild) {
    PrefetchForWrite(reinterpret_cast<const void*>(a));
    PrefetchForRead(reinterpret_cast<const void*>(a));
  }
  // A page that cannot be read and one that cannot be written: neither faults nor changes.
  void* none = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  PrefetchForWrite(none);
  PrefetchForRead(none);
  munmap(none, 4096);
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  memset(page, 0x5a, 4096);
  ASSERT_EQ(mprotect(page, 4096, PROT_READ), 0);
  PrefetchForWrite(static_cast<uint8_t*>(page) + 100);
  EXPECT_EQ(static_cast<uint8_t*>(page)[100], 0x5a);
  munmap(page, 4096);
}

TEST(PrefetchTest, TheLineKeepsItsBytes) {
  alignas(64) uint8_t line[64];
  for (int i = 0; i < 64; ++i) line[i] = static_cast<uint8_t>(i);
  PrefetchForWrite(line + 7);
  PrefetchForRead(line);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(line[i], i);
}

}  // namespace
}  // namespace softverbs
