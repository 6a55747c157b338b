// Asking for a cache line ahead of an access, as a hint: a prefetch faults on nothing and
// changes no byte, so any address may be given (a line it cannot reach is simply not fetched).
#pragma once

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace softverbs {

#if defined(__x86_64__)
namespace internal {
// CPUID 0x80000001 ECX bit 8 (PRFCHW): PREFETCHW is the CPU's (AMD since K8, Intel since
// Broadwell); Linux patches it in on that same bit (X86_FEATURE_3DNOWPREFETCH). Found when the
// library loads (false until then: a read prefetch).
inline bool CpuHasPrefetchW() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 8)) != 0;
}
inline const bool kHasPrefetchW = CpuHasPrefetchW();
}  // namespace internal
#endif

// The line holding `p`, in a state this core may write: the read-for-ownership a store would
// start when it commits starts now (x86-64 PREFETCHW where the CPU has it, else a read prefetch).
inline void PrefetchForWrite(const void* p) {
#if defined(__x86_64__)
  if (internal::kHasPrefetchW)
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
  else
    __builtin_prefetch(p, 0, 3);
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// The line holding `p`, to be read.
inline void PrefetchForRead(const void* p) { __builtin_prefetch(p, 0, 3); }

}  // namespace softverbs
