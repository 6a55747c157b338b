// The IB CM MADs a RoCE connection manager exchanges across hosts (IBA vol 1 chapter 12,
// Tables 106-120; the MAD format of chapter 13.4), and the RDMA IP CM Service header of
// Annex A11 (the kernel's struct cma_hdr). Layouts as the kernel's include/rdma/ibta_vol1_c12.h
// states them (every offset there + 24 for the common MAD header); multi-bit fields are packed
// from the most significant bit of their byte/word, as cm_msgs.h's accessors read them.
//
// DecodeMad() is the only way 256 bytes from QP1 become a message: it refuses what the kernel's
// MAD layer and CM agent refuse (validate_mad, the agent registered for class CM version 2) and
// never reads outside its span. EncodeMad() is its inverse, byte for byte for every field the
// message carries (reserved bits are sent as zero, as the kernel sends them).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>

#include "base/status.h"
#include "cm/wire.h"

namespace softverbs::cm::mad {

inline constexpr size_t kMadBytes = 256;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr uint8_t kBaseVersion = 1;     // IB_MGMT_BASE_VERSION
inline constexpr uint8_t kClassCm = 0x07;      // IB_MGMT_CLASS_CM
inline constexpr uint8_t kClassVersion = 2;    // IB_CM_CLASS_VERSION (cm_msgs.h)
inline constexpr uint8_t kMethodSend = 0x03;   // IB_MGMT_METHOD_SEND
inline constexpr uint32_t kQp1Qkey = 0x80010000;  // IB_QP1_QKEY
inline constexpr uint16_t kDefaultPkey = 0xffff;  // IB_DEFAULT_PKEY_FULL
inline constexpr uint16_t kPermissiveLid = 0xffff;  // what a RoCEv2 REQ carries (hop_limit > 1)

// Attribute IDs (include/rdma/ib_cm.h CM_*_ATTR_ID).
enum class Attr : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};
const char* AttrName(uint16_t attr_id);

// The common MAD header (struct ib_mad_hdr, 24 bytes).
struct MadHeader {
  uint8_t base_version = kBaseVersion;
  uint8_t mgmt_class = kClassCm;
  uint8_t class_version = kClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;       // the kernel: (agent hi_tid << 32) | local comm ID; a REP reuses the REQ's
  uint16_t attr_id = 0;   // set by EncodeMad from the body
  uint16_t resv = 0;
  uint32_t attr_mod = 0;  // ECE attribute modifier in REQ/REP/SIDR_REP, else 0
};

// One path of a REQ (primary at MAD offset 76, alternate at 120).
struct PathInfo {
  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  uint32_t flow_label = 0;  // 20 bits
  uint8_t packet_rate = 0;  // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;                 // 4 bits
  uint8_t subnet_local = 0;       // 1 bit
  uint8_t local_ack_timeout = 0;  // 5 bits
};

struct Req {  // Table 106
  uint32_t local_comm_id = 0;
  uint32_t ece_vendor_id = 0;  // 24 bits at 29 (reserved in the IBA; ECE in newer kernels)
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;                // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  uint8_t transport_type = 0;              // 2 bits: 0 RC, 1 UC, 3 XRC
  uint8_t flow_control = 0;                // 1 bit
  uint32_t starting_psn = 0;               // 24 bits
  uint8_t local_cm_response_timeout = 0;   // 5 bits
  uint8_t retry_count = 0;                 // 3 bits
  uint16_t pkey = 0;
  uint8_t path_mtu = 0;         // 4 bits, IB enum (1=256 ... 5=4096)
  uint8_t rdc_exists = 0;       // 1 bit
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  uint8_t srq = 0;              // 1 bit
  uint8_t extended_transport_type = 0;  // 3 bits
  PathInfo primary;
  PathInfo alternate;  // zero when absent
  uint8_t sap_supported = 0;  // 1 bit after the alternate local ACK timeout (CM_REQ_SAP_SUPPORTED)
  std::array<uint8_t, 92> private_data{};
};

struct Mra {  // Table 107
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint8_t message_mraed = 0;    // 2 bits: 0 REQ, 1 REP, 2 LAP
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, 222> private_data{};
};

struct Rej {  // Table 108
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint8_t message_rejected = 0;  // 2 bits: 0 REQ, 1 REP, 2 other
  uint8_t reject_info_length = 0;  // 7 bits
  uint16_t reason = 0;           // enum ib_cm_rej_reason
  std::array<uint8_t, 72> ari{};
  std::array<uint8_t, 148> private_data{};
};

struct Rep {  // Table 110
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;      // 24 bits
  uint32_t ece_vendor_id = 0;  // 24 bits in the reserved bytes 39, 43, 47 (H, M, L)
  uint32_t local_eecn = 0;     // 24 bits
  uint32_t starting_psn = 0;   // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  uint8_t flow_control = 0;       // 1 bit
  uint8_t rnr_retry_count = 0;    // 3 bits
  uint8_t srq = 0;                // 1 bit
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, 196> private_data{};
};

struct Rtu {  // Table 111
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
};

struct Dreq {  // Table 112
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;  // 24 bits
  std::array<uint8_t, 220> private_data{};
};

struct Drep {  // Table 113
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
};

struct SidrReq {  // Table 119
  uint32_t request_id = 0;
  uint16_t pkey = 0;
  uint64_t service_id = 0;
  std::array<uint8_t, 216> private_data{};
};

struct SidrRep {  // Table 120
  uint32_t request_id = 0;
  uint8_t status = 0;  // enum ib_cm_sidr_status
  uint8_t additional_info_length = 0;
  uint16_t ece_vendor_id_h = 0;  // 16 bits at 30 (reserved in the IBA; the kernel's CM_SIDR_REP_VENDOR_ID_H)
  uint32_t qpn = 0;  // 24 bits
  uint8_t ece_vendor_id_l = 0;  // at 35 (CM_SIDR_REP_VENDOR_ID_L)
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, 72> additional_info{};
  std::array<uint8_t, 136> private_data{};
};

using Body = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

struct Mad {
  MadHeader hdr;
  Body body;
};

// The attribute ID of a body.
uint16_t AttrOf(const Body& body);

// Parses one received MAD (exactly kMadBytes; a longer span is refused, as a UD payload of
// another size is not a MAD). Refusals, each naming the rule: EINVAL for length, base version,
// class, class version, method (validate_mad: CM attributes other than ClassPortInfo use Send);
// EOPNOTSUPP for attributes the CM agent does not take (ClassPortInfo, LAP, APR: RoCE has no
// alternate path) and unknown ones (the kernel's cm_recv_handler drops them).
Result<Mad> DecodeMad(std::span<const uint8_t> bytes);

// Writes `mad` (attr_id taken from its body). Refuses (EINVAL) a field wider than its wire bits.
Result<std::array<uint8_t, kMadBytes>> EncodeMad(const Mad& mad);

// ---- The RDMA IP CM Service (Annex A11; cma.c) ----

inline constexpr size_t kCmaHdrBytes = 36;
inline constexpr uint8_t kCmaVersion = 0x00;  // CMA_VERSION

// Port spaces (enum rdma_ucm_port_space) and the service ID of a port in one:
// cpu_to_be64((ps << 16) + port) (rdma_get_service_id()).
enum class PortSpace : uint16_t { kIpoib = 0x0002, kTcp = 0x0106, kUdp = 0x0111, kIb = 0x013f };
uint64_t ServiceId(PortSpace ps, uint16_t port);
// The port space and port of an RDMA IP service ID; EINVAL for any other service ID
// (cma_get_service_id's inverse: the top 48 bits are 0x0000000001xx / the IPoIB space).
Status PortOfServiceId(uint64_t service_id, PortSpace* ps, uint16_t* port);

// struct cma_hdr: the first 36 bytes of REQ and SIDR_REQ private data.
struct CmaHdr {
  uint8_t cma_version = kCmaVersion;
  uint8_t ip_version = 4;  // 4 or 6 (bits 7:4 on the wire)
  uint16_t port = 0;       // the active side's port
  Gid src{};  // IPv4 as ::ffff:a.b.c.d here; on the wire the address is in the last 4 bytes
  Gid dst{};
};
// Parses a cma_hdr as the passive side does (cma_save_ip_info): EINVAL unless the version is
// CMA_VERSION and the IP version 4 or 6 (the kernel then rejects with reason 28).
Result<CmaHdr> DecodeCmaHdr(std::span<const uint8_t> private_data);
// Writes `hdr` as cma_format_hdr does (IPv4: 12 zero bytes, then the address).
Status EncodeCmaHdr(const CmaHdr& hdr, std::span<uint8_t> private_data);

// ---- Mapping to and from the same-host message (cm/wire.h) ----

// What a MAD carries that cm::Message does not: its identifiers and path. Message has no comm
// IDs, TID, service ID, CA GUID, LIDs, P_Key, path MTU, timeouts or alternate path: the socket
// between two processes of one host is the connection, so it needs none of them.
struct MadContext {
  uint64_t tid = 0;
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t service_id = 0;     // REQ, SIDR_REQ, SIDR_REP
  uint64_t local_ca_guid = 0;  // REQ, REP
  Gid remote_gid{};            // REQ: the primary path's remote GID
  uint8_t path_mtu = 3;        // REQ: IB enum; 3 = 1024, rxe's at a 1500-byte netdev MTU
  uint32_t remote_qpn = 0;     // DREQ
};

// Starting PSN: on the wire each side's REQ/REP Starting PSN is the PSN its own receive queue
// expects, i.e. the one its peer's send queue starts from (rxe's capture: the passive side sends
// from the REQ's PSN, the active side from the REP's). Message::psn is mapped to that field as is;
// the same-host protocol uses it as the sender's send PSN, so an Id on the MAD conduit must
// program sq_psn = peer's PSN, rq_psn = its own (docs/cm.md, "Across hosts").
//
// The MAD for `m`, with the kernel's values for what a Message lacks (§1.7 of the wire notes:
// P_Key 0xFFFF, LIDs 0xFFFF, CM response timeouts 20, max CM retries 15, local ACK timeout 19).
// REQ and SIDR_REQ get the cma_hdr from m.src / m.dst. EINVAL if the private data does not fit.
Result<Mad> MadOfMessage(const Message& m, const MadContext& ctx);
// The Message a MAD stands for, and its identifiers in `ctx` (may be null). MRA has no Message
// (it only extends a timer): EOPNOTSUPP. REQ / SIDR_REQ: EINVAL if the cma_hdr is refused.
// Message::gid of a REP/RTU/REJ/DREQ/DREP/SIDR_REP is left zero: the conduit takes it from the
// datagram's source GID (IBA annex A17: the GRH/IP header). private_data_len is the whole area the message type allows, as the kernel reports it (the
// wire carries no length).
Result<Message> MessageOfMad(const Mad& mad, MadContext* ctx);

}  // namespace softverbs::cm::mad
