#include "core/types.h"

namespace softverbs::core {

const char* QpTypeName(QpType type) {
  switch (type) {
    case QpType::kRc: return "RC";
    case QpType::kUc: return "UC";
    case QpType::kUd: return "UD";
    case QpType::kRawPacket: return "RAW_PACKET";
    case QpType::kXrcSend: return "XRC_SEND";
    case QpType::kXrcRecv: return "XRC_RECV";
    case QpType::kDriver: return "DRIVER";
  }
  return "UNKNOWN_TYPE";
}

const char* QpStateName(QpState state) {
  switch (state) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kSqd: return "SQD";
    case QpState::kSqe: return "SQE";
    case QpState::kErr: return "ERR";
    case QpState::kUnknown: break;
  }
  return "UNKNOWN_STATE";
}

}  // namespace softverbs::core
