#include "fabric/packet/opcode.h"

namespace softverbs::fabric::packet {
namespace {

using enum Ext;
using enum Operation;
using enum Position;

// One row of the table before the transport prefix is applied.
struct Row {
  uint8_t code;  // low 5 bits of the opcode
  const char* name;
  Operation operation;
  Position position;
  bool request;
  bool has_payload;
  uint8_t ext_count;
  std::array<Ext, 2> ext;
};

// The RC operations (IBA 9.2, BTH OpCode; header order per rxe_opcode.c's masks).
constexpr Row kRcRows[] = {
    {op::kSendFirst, "SEND_FIRST", kSend, kFirst, true, true, 0, {}},
    {op::kSendMiddle, "SEND_MIDDLE", kSend, kMiddle, true, true, 0, {}},
    {op::kSendLast, "SEND_LAST", kSend, kLast, true, true, 0, {}},
    {op::kSendLastWithImmediate, "SEND_LAST_WITH_IMMEDIATE", kSend, kLast, true, true, 1, {kImmDt}},
    {op::kSendOnly, "SEND_ONLY", kSend, kOnly, true, true, 0, {}},
    {op::kSendOnlyWithImmediate, "SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, true, true, 1, {kImmDt}},
    {op::kRdmaWriteFirst, "RDMA_WRITE_FIRST", kRdmaWrite, kFirst, true, true, 1, {kReth}},
    {op::kRdmaWriteMiddle, "RDMA_WRITE_MIDDLE", kRdmaWrite, kMiddle, true, true, 0, {}},
    {op::kRdmaWriteLast, "RDMA_WRITE_LAST", kRdmaWrite, kLast, true, true, 0, {}},
    {op::kRdmaWriteLastWithImmediate, "RDMA_WRITE_LAST_WITH_IMMEDIATE", kRdmaWrite, kLast, true,
     true, 1, {kImmDt}},
    {op::kRdmaWriteOnly, "RDMA_WRITE_ONLY", kRdmaWrite, kOnly, true, true, 1, {kReth}},
    {op::kRdmaWriteOnlyWithImmediate, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", kRdmaWrite, kOnly, true,
     true, 2, {kReth, kImmDt}},
    {op::kRdmaReadRequest, "RDMA_READ_REQUEST", kRdmaReadRequest, kOnly, true, false, 1, {kReth}},
    {op::kRdmaReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", kRdmaReadResponse, kFirst, false, true,
     1, {kAeth}},
    {op::kRdmaReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", kRdmaReadResponse, kMiddle, false,
     true, 0, {}},
    {op::kRdmaReadResponseLast, "RDMA_READ_RESPONSE_LAST", kRdmaReadResponse, kLast, false, true, 1,
     {kAeth}},
    {op::kRdmaReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", kRdmaReadResponse, kOnly, false, true, 1,
     {kAeth}},
    {op::kAcknowledge, "ACKNOWLEDGE", kAcknowledge, kOnly, false, false, 1, {kAeth}},
    {op::kAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", kAtomicAcknowledge, kOnly, false, false, 2,
     {kAeth, kAtomicAckEth}},
    {op::kCompareSwap, "COMPARE_SWAP", kCompareSwap, kOnly, true, false, 1, {kAtomicEth}},
    {op::kFetchAdd, "FETCH_ADD", kFetchAdd, kOnly, true, false, 1, {kAtomicEth}},
    {op::kSendLastWithInvalidate, "SEND_LAST_WITH_INVALIDATE", kSend, kLast, true, true, 1,
     {kIeth}},
    {op::kSendOnlyWithInvalidate, "SEND_ONLY_WITH_INVALIDATE", kSend, kOnly, true, true, 1,
     {kIeth}},
};

// UC has the sends and writes of RC, without invalidate (IBA 9.2, BTH OpCode 0x20-0x2B).
constexpr uint8_t kUcLastCode = op::kRdmaWriteOnlyWithImmediate;

// UD has only SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, each with a DETH (IBA 9.2, 0x64/0x65).
constexpr Row kUdRows[] = {
    {op::kSendOnly, "SEND_ONLY", kSend, kOnly, true, true, 1, {kDeth}},
    {op::kSendOnlyWithImmediate, "SEND_ONLY_WITH_IMMEDIATE", kSend, kOnly, true, true, 2,
     {kDeth, kImmDt}},
};

// Names with their transport prefix, as rxe and Wireshark print them.
constexpr const char* kRcNames[] = {
    "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST", "RC_SEND_LAST_WITH_IMMEDIATE",
    "RC_SEND_ONLY", "RC_SEND_ONLY_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
    "RC_RDMA_WRITE_LAST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC_RDMA_WRITE_ONLY",
    "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST",
    "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST", "RC_RDMA_READ_RESPONSE_ONLY",
    "RC_ACKNOWLEDGE", "RC_ATOMIC_ACKNOWLEDGE", "RC_COMPARE_SWAP", "RC_FETCH_ADD", nullptr,
    "RC_SEND_LAST_WITH_INVALIDATE", "RC_SEND_ONLY_WITH_INVALIDATE"};
constexpr const char* kUcNames[] = {
    "UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST", "UC_SEND_LAST_WITH_IMMEDIATE",
    "UC_SEND_ONLY", "UC_SEND_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"};

constexpr OpcodeInfo MakeInfo(const Row& row, Transport transport, const char* name) {
  OpcodeInfo info;
  info.name = name;
  info.transport = transport;
  info.operation = row.operation;
  info.position = row.position;
  info.request = row.request;
  info.has_payload = row.has_payload;
  info.ext_count = row.ext_count;
  info.ext = row.ext;
  info.header_bytes = static_cast<uint8_t>(kBthBytes);
  for (uint8_t i = 0; i < row.ext_count; ++i) {
    info.header_bytes += ExtBytes(row.ext[i]);
    if (row.ext[i] == kImmDt) info.has_immediate = true;
    if (row.ext[i] == kIeth) info.has_invalidate = true;
  }
  return info;
}

constexpr std::array<OpcodeInfo, 256> MakeTable() {
  std::array<OpcodeInfo, 256> table{};
  for (const Row& row : kRcRows)
    table[op::kRc | row.code] = MakeInfo(row, Transport::kRc, kRcNames[row.code]);
  for (const Row& row : kRcRows) {
    if (row.code > kUcLastCode) continue;
    table[op::kUc | row.code] = MakeInfo(row, Transport::kUc, kUcNames[row.code]);
  }
  table[op::kUd | op::kSendOnly] = MakeInfo(kUdRows[0], Transport::kUd, "UD_SEND_ONLY");
  table[op::kUd | op::kSendOnlyWithImmediate] =
      MakeInfo(kUdRows[1], Transport::kUd, "UD_SEND_ONLY_WITH_IMMEDIATE");
  return table;
}

}  // namespace

constexpr std::array<OpcodeInfo, 256> kOpcodeTable = MakeTable();

// Header lengths as rxe_opcode.c lists them (its .length fields).
static_assert(kOpcodeTable[op::kSendOnly].header_bytes == 12);
static_assert(kOpcodeTable[op::kRdmaWriteOnlyWithImmediate].header_bytes == 32);
static_assert(kOpcodeTable[op::kAtomicAcknowledge].header_bytes == 24);
static_assert(kOpcodeTable[op::kCompareSwap].header_bytes == 40);
static_assert(kOpcodeTable[op::kUd | op::kSendOnlyWithImmediate].header_bytes == 24);
static_assert(kOpcodeTable[op::kUd | op::kSendOnlyWithImmediate].OffsetOf(Ext::kImmDt) == 12 + 8);
static_assert(!kOpcodeTable[0x15].known() && !kOpcodeTable[0x2c].known());
static_assert(!kOpcodeTable[op::kUc | op::kCompareSwap].known());

}  // namespace softverbs::fabric::packet
