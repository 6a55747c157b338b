#include "cm/mad.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace softverbs::cm::mad {
namespace {

// Bits `width` from bit `bit` (0 = most significant) of byte `byte`, big-endian across bytes: how
// the IBA tables and cm_msgs.h's accessors lay out every sub-field.
uint64_t GetBits(const uint8_t* m, size_t byte, unsigned bit, unsigned width) {
  uint64_t v = 0;
  for (unsigned i = 0; i < width; ++i) {
    const size_t pos = byte * 8 + bit + i;
    v = v << 1 | ((m[pos / 8] >> (7 - pos % 8)) & 1u);
  }
  return v;
}

void PutBits(uint8_t* m, size_t byte, unsigned bit, unsigned width, uint64_t v) {
  for (unsigned i = 0; i < width; ++i) {
    const size_t pos = byte * 8 + bit + i;
    const uint8_t mask = static_cast<uint8_t>(1u << (7 - pos % 8));
    if ((v >> (width - 1 - i)) & 1u)
      m[pos / 8] |= mask;
    else
      m[pos / 8] &= static_cast<uint8_t>(~mask);
  }
}

// One description of each layout serves both directions: Fields(io, msg) with a Reader fills
// the message from the bytes, with a Writer writes the bytes from the message.
struct Reader {
  static constexpr bool kReading = true;
  const uint8_t* m;
  template <typename T>
  void operator()(size_t byte, unsigned bit, unsigned width, T& field, const char*) {
    field = static_cast<T>(GetBits(m, byte, bit, width));
  }
  template <size_t N>
  void Bytes(size_t byte, std::array<uint8_t, N>& field) {
    memcpy(field.data(), m + byte, N);
  }
  void Check(uint64_t, unsigned, const char*) {}
};

struct Writer {
  static constexpr bool kReading = false;
  uint8_t* m;
  std::string error;  // the first field too wide for its bits
  void Check(uint64_t v, unsigned width, const char* name) {
    if (width < 64 && (v >> width) != 0 && error.empty())
      error = std::string(name) + " " + std::to_string(v) + " does not fit its " + std::to_string(width) +
              " bits (IBA vol 1 chapter 12 message tables)";
  }
  template <typename T>
  void operator()(size_t byte, unsigned bit, unsigned width, T& field, const char* name) {
    Check(static_cast<uint64_t>(field), width, name);
    PutBits(m, byte, bit, width, static_cast<uint64_t>(field));
  }
  template <size_t N>
  void Bytes(size_t byte, std::array<uint8_t, N>& field) {
    memcpy(m + byte, field.data(), N);
  }
};

template <typename Io>
void Comm(Io& io, uint32_t& local, uint32_t& remote) {
  io(24, 0, 32, local, "local comm ID");
  io(28, 0, 32, remote, "remote comm ID");
}

template <typename Io>
void Fields(Io& io, PathInfo& p, size_t b) {
  io(b, 0, 16, p.local_lid, "local port LID");
  io(b + 2, 0, 16, p.remote_lid, "remote port LID");
  io.Bytes(b + 4, p.local_gid);
  io.Bytes(b + 20, p.remote_gid);
  io(b + 36, 0, 20, p.flow_label, "flow label");
  io(b + 36, 26, 6, p.packet_rate, "packet rate");
  io(b + 40, 0, 8, p.traffic_class, "traffic class");
  io(b + 41, 0, 8, p.hop_limit, "hop limit");
  io(b + 42, 0, 4, p.sl, "SL");
  io(b + 42, 4, 1, p.subnet_local, "subnet local");
  io(b + 43, 0, 5, p.local_ack_timeout, "local ACK timeout");
}

template <typename Io>
void Fields(Io& io, Req& r) {  // Table 106
  io(24, 0, 32, r.local_comm_id, "local comm ID");
  io(29, 0, 24, r.ece_vendor_id, "ECE vendor ID");
  io(32, 0, 64, r.service_id, "service ID");
  io(40, 0, 64, r.local_ca_guid, "local CA GUID");
  io(52, 0, 32, r.local_qkey, "local Q_Key");
  io(56, 0, 24, r.local_qpn, "local QPN");
  io(59, 0, 8, r.responder_resources, "responder resources");
  io(60, 0, 24, r.local_eecn, "local EECN");
  io(63, 0, 8, r.initiator_depth, "initiator depth");
  io(64, 0, 24, r.remote_eecn, "remote EECN");
  io(67, 0, 5, r.remote_cm_response_timeout, "remote CM response timeout");
  io(67, 5, 2, r.transport_type, "transport service type");
  io(67, 7, 1, r.flow_control, "end-to-end flow control");
  io(68, 0, 24, r.starting_psn, "starting PSN");
  io(71, 0, 5, r.local_cm_response_timeout, "local CM response timeout");
  io(71, 5, 3, r.retry_count, "retry count");
  io(72, 0, 16, r.pkey, "partition key");
  io(74, 0, 4, r.path_mtu, "path MTU");
  io(74, 4, 1, r.rdc_exists, "RDC exists");
  io(74, 5, 3, r.rnr_retry_count, "RNR retry count");
  io(75, 0, 4, r.max_cm_retries, "max CM retries");
  io(75, 4, 1, r.srq, "SRQ");
  io(75, 5, 3, r.extended_transport_type, "extended transport type");
  Fields(io, r.primary, 76);
  Fields(io, r.alternate, 120);
  io(163, 5, 1, r.sap_supported, "SAP supported");
  io.Bytes(164, r.private_data);
}

template <typename Io>
void Fields(Io& io, Mra& r) {  // Table 107
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io(32, 0, 2, r.message_mraed, "message MRAed");
  io(33, 0, 5, r.service_timeout, "service timeout");
  io.Bytes(34, r.private_data);
}

template <typename Io>
void Fields(Io& io, Rej& r) {  // Table 108
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io(32, 0, 2, r.message_rejected, "message rejected");
  io(33, 0, 7, r.reject_info_length, "reject info length");
  io(34, 0, 16, r.reason, "reason");
  io.Bytes(36, r.ari);
  io.Bytes(108, r.private_data);
}

template <typename Io>
void Fields(Io& io, Rep& r) {  // Table 110
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io(32, 0, 32, r.local_qkey, "local Q_Key");
  io(36, 0, 24, r.local_qpn, "local QPN");
  io(40, 0, 24, r.local_eecn, "local EECN");
  io(44, 0, 24, r.starting_psn, "starting PSN");
  // ECE: the vendor ID's three bytes sit in the reserved byte after each 24-bit field.
  io.Check(r.ece_vendor_id, 24, "ECE vendor ID");
  uint8_t h = static_cast<uint8_t>(r.ece_vendor_id >> 16), m = static_cast<uint8_t>(r.ece_vendor_id >> 8),
          l = static_cast<uint8_t>(r.ece_vendor_id);
  io(39, 0, 8, h, "ECE vendor ID");
  io(43, 0, 8, m, "ECE vendor ID");
  io(47, 0, 8, l, "ECE vendor ID");
  if constexpr (Io::kReading) r.ece_vendor_id = uint32_t{h} << 16 | uint32_t{m} << 8 | l;
  io(48, 0, 8, r.responder_resources, "responder resources");
  io(49, 0, 8, r.initiator_depth, "initiator depth");
  io(50, 0, 5, r.target_ack_delay, "target ACK delay");
  io(50, 5, 2, r.failover_accepted, "failover accepted");
  io(50, 7, 1, r.flow_control, "end-to-end flow control");
  io(51, 0, 3, r.rnr_retry_count, "RNR retry count");
  io(51, 3, 1, r.srq, "SRQ");
  io(52, 0, 64, r.local_ca_guid, "local CA GUID");
  io.Bytes(60, r.private_data);
}

template <typename Io>
void Fields(Io& io, Rtu& r) {  // Table 111
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io.Bytes(32, r.private_data);
}

template <typename Io>
void Fields(Io& io, Dreq& r) {  // Table 112
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io(32, 0, 24, r.remote_qpn, "remote QPN/EECN");
  io.Bytes(36, r.private_data);
}

template <typename Io>
void Fields(Io& io, Drep& r) {  // Table 113
  Comm(io, r.local_comm_id, r.remote_comm_id);
  io.Bytes(32, r.private_data);
}

template <typename Io>
void Fields(Io& io, SidrReq& r) {  // Table 119
  io(24, 0, 32, r.request_id, "request ID");
  io(28, 0, 16, r.pkey, "partition key");
  io(32, 0, 64, r.service_id, "service ID");
  io.Bytes(40, r.private_data);
}

template <typename Io>
void Fields(Io& io, SidrRep& r) {  // Table 120
  io(24, 0, 32, r.request_id, "request ID");
  io(28, 0, 8, r.status, "status");
  io(29, 0, 8, r.additional_info_length, "additional info length");
  io(30, 0, 16, r.ece_vendor_id_h, "ECE vendor ID");
  io(32, 0, 24, r.qpn, "QPN");
  io(35, 0, 8, r.ece_vendor_id_l, "ECE vendor ID");
  io(36, 0, 64, r.service_id, "service ID");
  io(44, 0, 32, r.qkey, "Q_Key");
  io.Bytes(48, r.additional_info);
  io.Bytes(120, r.private_data);
}

template <typename Io>
void Fields(Io& io, MadHeader& h) {  // struct ib_mad_hdr
  io(0, 0, 8, h.base_version, "base version");
  io(1, 0, 8, h.mgmt_class, "management class");
  io(2, 0, 8, h.class_version, "class version");
  io(3, 0, 8, h.method, "method");
  io(4, 0, 16, h.status, "status");
  io(6, 0, 16, h.class_specific, "class specific");
  io(8, 0, 64, h.tid, "TID");
  io(16, 0, 16, h.attr_id, "attribute ID");
  io(18, 0, 16, h.resv, "reserved");
  io(20, 0, 32, h.attr_mod, "attribute modifier");
}

template <typename T>
Body Read(const uint8_t* m) {
  T body;
  Reader r{m};
  Fields(r, body);
  return body;
}

std::string Hex(unsigned v) {
  char b[16];
  snprintf(b, sizeof b, "0x%x", v);
  return b;
}

// The header checks of the kernel's MAD layer and CM agent, in their order.
Status CheckHeader(const MadHeader& h) {
  // mad.c validate_mad: "Make sure MAD base version is understood".
  if (h.base_version != kBaseVersion)
    return Invalid("MAD base version " + std::to_string(h.base_version) + " is not 1 (IB_MGMT_BASE_VERSION; "
                   "mad.c validate_mad drops it)");
  // No agent but the CM's takes a MAD on this path (ib_cm registers class 0x07 version 2).
  if (h.mgmt_class != kClassCm)
    return Invalid("management class " + Hex(h.mgmt_class) + " is not CM 0x07 (IBA 13.4.4: only the CM "
                   "agent is registered on this QP1)");
  // mad.c validate_mad: "CM attributes other than ClassPortInfo only use Send method".
  if (h.attr_id != static_cast<uint16_t>(Attr::kClassPortInfo) && h.method != kMethodSend)
    return Invalid("method " + Hex(h.method) + " on CM attribute " + AttrName(h.attr_id) +
                   ": CM attributes other than ClassPortInfo use Send 0x03 (mad.c validate_mad)");
  if (h.class_version != kClassVersion)
    return Invalid("CM class version " + std::to_string(h.class_version) + " is not 2 (IB_CM_CLASS_VERSION: "
                   "no agent registered for it, mad.c find_mad_agent)");
  return Status::Ok();
}

}  // namespace

const char* AttrName(uint16_t attr_id) {
  switch (static_cast<Attr>(attr_id)) {
    case Attr::kClassPortInfo: return "ClassPortInfo";
    case Attr::kReq: return "REQ";
    case Attr::kMra: return "MRA";
    case Attr::kRej: return "REJ";
    case Attr::kRep: return "REP";
    case Attr::kRtu: return "RTU";
    case Attr::kDreq: return "DREQ";
    case Attr::kDrep: return "DREP";
    case Attr::kSidrReq: return "SIDR_REQ";
    case Attr::kSidrRep: return "SIDR_REP";
    case Attr::kLap: return "LAP";
    case Attr::kApr: return "APR";
  }
  return "unknown";
}

uint16_t AttrOf(const Body& body) {
  static constexpr Attr kAttrs[] = {Attr::kReq,  Attr::kMra,  Attr::kRej,     Attr::kRep,    Attr::kRtu,
                                    Attr::kDreq, Attr::kDrep, Attr::kSidrReq, Attr::kSidrRep};
  static_assert(std::size(kAttrs) == std::variant_size_v<Body>);
  return static_cast<uint16_t>(kAttrs[body.index()]);
}

Result<Mad> DecodeMad(std::span<const uint8_t> bytes) {
  if (bytes.size() != kMadBytes)
    return Invalid("a CM MAD is " + std::to_string(kMadBytes) + " bytes, not " + std::to_string(bytes.size()) +
                   " (IBA 13.4.1: MADs are 256 bytes)");
  Mad mad;
  Reader r{bytes.data()};
  Fields(r, mad.hdr);
  SV_RETURN_IF_ERROR(CheckHeader(mad.hdr));
  const uint8_t* m = bytes.data();
  switch (static_cast<Attr>(mad.hdr.attr_id)) {
    case Attr::kReq: mad.body = Read<Req>(m); break;
    case Attr::kMra: mad.body = Read<Mra>(m); break;
    case Attr::kRej: mad.body = Read<Rej>(m); break;
    case Attr::kRep: mad.body = Read<Rep>(m); break;
    case Attr::kRtu: mad.body = Read<Rtu>(m); break;
    case Attr::kDreq: mad.body = Read<Dreq>(m); break;
    case Attr::kDrep: mad.body = Read<Drep>(m); break;
    case Attr::kSidrReq: mad.body = Read<SidrReq>(m); break;
    case Attr::kSidrRep: mad.body = Read<SidrRep>(m); break;
    default:
      // cm.c cm_recv_handler: any other attribute is freed unanswered. LAP/APR need an
      // alternate path, which RoCE does not have; ClassPortInfo is not asked of a RoCE CM.
      return NotSupported(std::string("CM attribute ") + Hex(mad.hdr.attr_id) + " (" + AttrName(mad.hdr.attr_id) +
                          ") is not handled (cm.c cm_recv_handler drops it)");
  }
  return mad;
}

Result<std::array<uint8_t, kMadBytes>> EncodeMad(const Mad& mad) {
  std::array<uint8_t, kMadBytes> out{};
  Writer w{out.data(), {}};
  MadHeader hdr = mad.hdr;
  hdr.attr_id = AttrOf(mad.body);
  Fields(w, hdr);
  Body body = mad.body;
  std::visit([&w](auto& b) { Fields(w, b); }, body);
  if (!w.error.empty()) return Invalid(std::string(AttrName(hdr.attr_id)) + ": " + w.error);
  return out;
}

// ---- RDMA IP CM Service ----

uint64_t ServiceId(PortSpace ps, uint16_t port) { return uint64_t{static_cast<uint16_t>(ps)} << 16 | port; }

Status PortOfServiceId(uint64_t service_id, PortSpace* ps, uint16_t* port) {
  const auto space = static_cast<uint16_t>(service_id >> 16);
  if (service_id >> 32 != 0 ||
      (space != static_cast<uint16_t>(PortSpace::kTcp) && space != static_cast<uint16_t>(PortSpace::kUdp) &&
       space != static_cast<uint16_t>(PortSpace::kIb) && space != static_cast<uint16_t>(PortSpace::kIpoib))) {
    char b[40];
    snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(service_id));
    return Invalid(std::string("service ID ") + b + " is not in an RDMA IP port space (Annex A11: "
                   "0x0000000001PPpppp; cma.c cma_get_service_id)");
  }
  *ps = static_cast<PortSpace>(space);
  *port = static_cast<uint16_t>(service_id);
  return Status::Ok();
}

Result<CmaHdr> DecodeCmaHdr(std::span<const uint8_t> pd) {
  if (pd.size() < kCmaHdrBytes)
    return Invalid("private data of " + std::to_string(pd.size()) + " bytes cannot hold the 36-byte IP CM header");
  CmaHdr h;
  h.cma_version = pd[0];
  h.ip_version = pd[1] >> 4;
  h.port = static_cast<uint16_t>(pd[2] << 8 | pd[3]);
  // cma.c cma_save_ip_info: anything but CMA_VERSION, or an IP version other than 4 or 6, is
  // -EINVAL, which the kernel answers with REJ CONSUMER_DEFINED.
  if (h.cma_version != kCmaVersion)
    return Invalid("IP CM header version " + Hex(h.cma_version) + " is not 0 (Annex A11 MajV.MinV 0.0; "
                   "cma.c cma_save_ip_info)");
  if (h.ip_version != 4 && h.ip_version != 6)
    return Invalid("IP CM header IP version " + std::to_string(h.ip_version) + " is neither 4 nor 6 "
                   "(Annex A11; cma.c cma_save_ip_info)");
  if (h.ip_version == 4) {
    h.src[10] = h.src[11] = h.dst[10] = h.dst[11] = 0xff;
    memcpy(h.src.data() + 12, pd.data() + 4 + 12, 4);
    memcpy(h.dst.data() + 12, pd.data() + 20 + 12, 4);
  } else {
    memcpy(h.src.data(), pd.data() + 4, 16);
    memcpy(h.dst.data(), pd.data() + 20, 16);
  }
  return h;
}

Status EncodeCmaHdr(const CmaHdr& h, std::span<uint8_t> pd) {
  if (pd.size() < kCmaHdrBytes) return Invalid("no room for the 36-byte IP CM header");
  if (h.ip_version != 4 && h.ip_version != 6)
    return Invalid("IP CM header: IP version " + std::to_string(h.ip_version) + " is neither 4 nor 6");
  memset(pd.data(), 0, kCmaHdrBytes);
  pd[0] = h.cma_version;
  pd[1] = static_cast<uint8_t>(h.ip_version << 4);
  pd[2] = static_cast<uint8_t>(h.port >> 8);
  pd[3] = static_cast<uint8_t>(h.port);
  if (h.ip_version == 4) {  // cma_format_hdr: only ip4.addr, after 12 zero bytes
    memcpy(pd.data() + 4 + 12, h.src.data() + 12, 4);
    memcpy(pd.data() + 20 + 12, h.dst.data() + 12, 4);
  } else {
    memcpy(pd.data() + 4, h.src.data(), 16);
    memcpy(pd.data() + 20, h.dst.data(), 16);
  }
  return Status::Ok();
}

}  // namespace softverbs::cm::mad
