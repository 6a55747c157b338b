// The bits an application stored in an enum field of an rdma-core struct. A value outside the
// enum's range (an opcode no header names) is the application's to give and ours to refuse with
// EINVAL; loading it as the enum type is undefined behaviour in C++ (UBSan: "load of value 7,
// which is not a valid value for type 'ibv_ops_wr_opcode'"). So such fields are read as bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace softverbs::abi {

template <typename Enum>
uint32_t RawEnum(const Enum& field) {
  static_assert(std::is_enum_v<Enum>);
  std::underlying_type_t<Enum> bits;
  memcpy(&bits, &field, sizeof bits);
  return static_cast<uint32_t>(bits);
}

}  // namespace softverbs::abi
