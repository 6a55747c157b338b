// Small formatting helpers for log lines and refusal rules.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace softverbs {

// "0x1f"
inline std::string Hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace softverbs
