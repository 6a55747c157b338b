// What an identifier reports through its channel: rdma_cm_event's content without rdma-core's
// structs. EventType values equal enum rdma_cm_event_type (abi/rdmacm checks it).
#pragma once

#include <cstdint>
#include <vector>

#include "cm/wire.h"

namespace softverbs::cm {

class Id;

enum class EventType : uint8_t {
  kAddrResolved,
  kAddrError,
  kRouteResolved,
  kRouteError,
  kConnectRequest,
  kConnectResponse,
  kConnectError,
  kUnreachable,
  kRejected,
  kEstablished,
  kDisconnected,
  kDeviceRemoval,
  kMulticastJoin,
  kMulticastError,
  kAddrChange,
  kTimewaitExit,
};

// rdma_conn_param's content.
struct ConnParam {
  std::vector<uint8_t> private_data;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 0;
  uint8_t srq = 0;
  uint32_t qp_num = 0;
  // Sent: the ECE a REQ / REP carries (librdmacm's ucma_abi_ece of connect / accept). Received:
  // the peer's, as the kernel reports it with CONNECT_REQUEST / CONNECT_RESPONSE / ESTABLISHED.
  Ece ece;
};

// rdma_ud_param's content: how to reach the remote UD QP.
struct UdParam {
  std::vector<uint8_t> private_data;
  Gid dgid{};
  uint8_t sgid_index = 0;
  uint8_t port_num = 1;
  uint32_t qp_num = 0;
  uint32_t qkey = 0;
};

struct Event {
  EventType type = EventType::kAddrResolved;
  // MULTICAST_JOIN / MULTICAST_ERROR: the caller's context of rdma_join_multicast, which the
  // event returns "through the private_data field" (rdma_join_multicast(3)).
  void* join_context = nullptr;
  int status = 0;
  Id* id = nullptr;
  Id* listen_id = nullptr;
  bool ud = false;  // param is `ud` (UD identifiers' ESTABLISHED and CONNECT_REQUEST)
  ConnParam conn;
  UdParam ud_param;
};

// IBA chapter 12 REJ reasons and SIDR_REP statuses (the kernel's enum ib_cm_rej_reason and
// ib_cm_sidr_status) that rdma_cm reports as the event's status.
constexpr int kRejInvalidServiceId = 8;    // REQ for a service nobody listens to
constexpr int kRejConsumerDefined = 28;    // rdma_reject()
constexpr int kRejVendorOptionNotSupported = 35;  // rdma_reject_ece() (IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED)
constexpr int kSidrReject = 1;             // rdma_reject() of a SIDR_REQ
constexpr int kSidrUnsupported = 2;        // SIDR_REQ for a service nobody listens to

// The QPN of a multicast destination (IBA 10.5.2.2: 0xFFFFFF in a UD send's DETH).
constexpr uint32_t kMulticastQpn = 0xffffff;

}  // namespace softverbs::cm
