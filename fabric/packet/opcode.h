// The BTH opcodes softverbs speaks on the wire, one descriptor each (IBA Vol 1 9.2;
// the same facts as the kernel's rxe_opcode[] in drivers/infiniband/sw/rxe/rxe_opcode.c).
//
// The descriptor says which extension headers follow the BTH and in which order, whether the
// packet may carry payload, its place in a message, and its total header length. Parsing and
// building both read this table, so the two can never disagree about a layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace softverbs::fabric::packet {

// The transport service, from the opcode's top 3 bits (IBA 9.2: RC 000, UC 001, RD 010, UD 011).
enum class Transport : uint8_t { kRc, kUc, kUd };

// Where a packet sits in its message (IBA 9.8: FIRST/MIDDLE/LAST/ONLY packets).
enum class Position : uint8_t { kFirst, kMiddle, kLast, kOnly };

// What the packet does; the transport dispatches on it.
enum class Operation : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaReadRequest,
  kRdmaReadResponse,
  kAcknowledge,
  kAtomicAcknowledge,
  kCompareSwap,
  kFetchAdd,
};

// Extension headers (IBA 9.3), in the order they may follow the BTH.
enum class Ext : uint8_t { kReth, kAeth, kAtomicEth, kAtomicAckEth, kDeth, kImmDt, kIeth };

inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kIcrcBytes = 4;

// The size of one extension header on the wire (IBA 9.3).
constexpr uint8_t ExtBytes(Ext e) {
  switch (e) {
    case Ext::kReth: return 16;
    case Ext::kAeth: return 4;
    case Ext::kAtomicEth: return 28;
    case Ext::kAtomicAckEth: return 8;
    case Ext::kDeth: return 8;
    case Ext::kImmDt: return 4;
    case Ext::kIeth: return 4;
  }
  return 0;
}

struct OpcodeInfo {
  const char* name = nullptr;  // nullptr: not an opcode softverbs knows
  Transport transport = Transport::kRc;
  Operation operation = Operation::kSend;
  Position position = Position::kOnly;
  bool request = false;      // false: a response (goes to the requester's completer)
  bool has_payload = false;  // may carry payload bytes (zero bytes is still allowed)
  bool has_immediate = false;
  bool has_invalidate = false;
  uint8_t ext_count = 0;
  std::array<Ext, 2> ext{};     // ext[0..ext_count), in wire order after the BTH
  uint8_t header_bytes = 0;     // BTH + extension headers; the payload starts here

  constexpr bool known() const { return name != nullptr; }
  constexpr bool Has(Ext e) const {
    for (uint8_t i = 0; i < ext_count; ++i)
      if (ext[i] == e) return true;
    return false;
  }
  // Offset of extension header `e` from the start of the BTH; only meaningful if Has(e).
  constexpr uint8_t OffsetOf(Ext e) const {
    uint8_t off = static_cast<uint8_t>(kBthBytes);
    for (uint8_t i = 0; i < ext_count && ext[i] != e; ++i) off += ExtBytes(ext[i]);
    return off;
  }
  constexpr bool starts_message() const {
    return position == Position::kFirst || position == Position::kOnly;
  }
  constexpr bool ends_message() const {
    return position == Position::kLast || position == Position::kOnly;
  }
};

// Indexed by the BTH opcode byte; entries softverbs does not know have name == nullptr.
extern const std::array<OpcodeInfo, 256> kOpcodeTable;

// The descriptor of `opcode`, or nullptr if it is not one of the opcodes in the table (reserved,
// RD, CNP 0x81, and rxe's FLUSH 0x1C / ATOMIC_WRITE 0x1D, which softverbs does not put on the wire:
// its ATOMIC WRITE is same-host only).
inline const OpcodeInfo* LookupOpcode(uint8_t opcode) {
  const OpcodeInfo& info = kOpcodeTable[opcode];
  return info.known() ? &info : nullptr;
}

// Opcode values (IBA 9.2, BTH OpCode), named like rxe's IB_OPCODE_* constants.
namespace op {
inline constexpr uint8_t kRc = 0x00, kUc = 0x20, kUd = 0x60;
inline constexpr uint8_t kSendFirst = 0x00;
inline constexpr uint8_t kSendMiddle = 0x01;
inline constexpr uint8_t kSendLast = 0x02;
inline constexpr uint8_t kSendLastWithImmediate = 0x03;
inline constexpr uint8_t kSendOnly = 0x04;
inline constexpr uint8_t kSendOnlyWithImmediate = 0x05;
inline constexpr uint8_t kRdmaWriteFirst = 0x06;
inline constexpr uint8_t kRdmaWriteMiddle = 0x07;
inline constexpr uint8_t kRdmaWriteLast = 0x08;
inline constexpr uint8_t kRdmaWriteLastWithImmediate = 0x09;
inline constexpr uint8_t kRdmaWriteOnly = 0x0a;
inline constexpr uint8_t kRdmaWriteOnlyWithImmediate = 0x0b;
inline constexpr uint8_t kRdmaReadRequest = 0x0c;
inline constexpr uint8_t kRdmaReadResponseFirst = 0x0d;
inline constexpr uint8_t kRdmaReadResponseMiddle = 0x0e;
inline constexpr uint8_t kRdmaReadResponseLast = 0x0f;
inline constexpr uint8_t kRdmaReadResponseOnly = 0x10;
inline constexpr uint8_t kAcknowledge = 0x11;
inline constexpr uint8_t kAtomicAcknowledge = 0x12;
inline constexpr uint8_t kCompareSwap = 0x13;
inline constexpr uint8_t kFetchAdd = 0x14;
inline constexpr uint8_t kSendLastWithInvalidate = 0x16;
inline constexpr uint8_t kSendOnlyWithInvalidate = 0x17;
}  // namespace op

}  // namespace softverbs::fabric::packet
