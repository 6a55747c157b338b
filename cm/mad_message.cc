// cm::Message <-> CM MAD (cm/mad.h): what the same-host protocol says, in the IBA's words.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "cm/address.h"
#include "cm/mad.h"

namespace softverbs::cm::mad {
namespace {

// What the kernel puts in a RoCE REQ/REP for what a Message does not carry (cma.c
// cma_connect_ib / cma_resolve_iboe_route, cm.c cm_format_req; rxe's values where the device
// decides). Verified against rxe's REQ and REP in tests/unit/fabric/packet/data/rxe_rping_cm.pcap.
constexpr uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
constexpr uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t kLocalAckTimeout = 19;    // cm_ack_timeout(RXE_LOCAL_CA_ACK_DELAY 15, 18)
constexpr uint8_t kTargetAckDelay = 15;     // RXE_LOCAL_CA_ACK_DELAY
constexpr uint8_t kHopLimit = 64;           // the route's (IPv4 default TTL)
constexpr uint32_t kEceVendorMask = 0xffffff;  // the 24-bit vendor ID fields of REQ / REP

Gid GidOfStorage(const sockaddr_storage& s) { return GidOf(reinterpret_cast<const sockaddr*>(&s)); }
uint16_t PortOfStorage(const sockaddr_storage& s) { return PortOf(reinterpret_cast<const sockaddr*>(&s)); }

sockaddr_storage StorageOf(const Gid& gid, uint8_t ip_version, uint16_t port) {
  sockaddr_storage s{};
  if (ip_version == 4) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&s);
    sin->sin_family = AF_INET;
    memcpy(&sin->sin_addr, gid.data() + 12, 4);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&s);
    sin6->sin6_family = AF_INET6;
    memcpy(&sin6->sin6_addr, gid.data(), 16);
  }
  SetPort(&s, port);
  return s;
}

// Consumer data after `offset` bytes of the MAD's private-data area.
template <size_t N>
Status PutPrivate(const Message& m, size_t offset, std::array<uint8_t, N>* out) {
  if (m.private_data_len > N - offset || m.private_data_len > m.private_data.size())
    return Invalid(std::string(MessageName(m.type)) + ": private_data_len " + std::to_string(m.private_data_len) +
                   " exceeds the " + std::to_string(N - offset) + " bytes the MAD holds (IBA 12.6)");
  std::copy_n(m.private_data.begin(), m.private_data_len, out->begin() + offset);
  return Status::Ok();
}

template <size_t N>
void GetPrivate(const std::array<uint8_t, N>& in, size_t offset, Message* m) {
  const size_t n = std::min(N - offset, m->private_data.size());
  std::copy_n(in.begin() + offset, n, m->private_data.begin());
  m->private_data_len = static_cast<uint8_t>(n);
}

Status PutCmaHdr(const Message& m, std::array<uint8_t, kCmaHdrBytes>* hdr_bytes) {
  CmaHdr h;
  h.ip_version = m.src.ss_family == AF_INET6 ? 6 : 4;
  h.port = PortOfStorage(m.src);
  h.src = GidOfStorage(m.src);
  h.dst = GidOfStorage(m.dst);
  return EncodeCmaHdr(h, *hdr_bytes);
}

Result<Req> ReqOf(const Message& m, const MadContext& ctx) {
  Req r;
  r.local_comm_id = ctx.local_comm_id;
  r.service_id = ctx.service_id;
  r.local_ca_guid = ctx.local_ca_guid;
  r.local_qkey = m.qkey;
  r.local_qpn = m.qpn;
  r.responder_resources = m.responder_resources;
  r.initiator_depth = m.initiator_depth;
  r.remote_cm_response_timeout = r.local_cm_response_timeout = kCmResponseTimeout;
  r.flow_control = m.flow_control;
  r.starting_psn = m.psn;
  r.retry_count = std::min<uint8_t>(m.retry_count, 7);
  r.pkey = kDefaultPkey;
  r.path_mtu = ctx.path_mtu;
  r.rnr_retry_count = std::min<uint8_t>(m.rnr_retry_count, 7);
  r.max_cm_retries = kMaxCmRetries;
  r.srq = m.srq;
  r.ece_vendor_id = m.ece.vendor_id & kEceVendorMask;  // IBA_SET(CM_REQ_VENDOR_ID) keeps 24 bits
  r.primary.local_lid = r.primary.remote_lid = kPermissiveLid;
  r.primary.local_gid = m.gid;
  r.primary.remote_gid = ctx.remote_gid;
  // cma.c cma_resolve_iboe_route: flow label = (sport * 31 + dport) & 0xFFFFF.
  r.primary.flow_label = (uint32_t{PortOfStorage(m.src)} * 31 + PortOfStorage(m.dst)) & 0xfffff;
  r.primary.hop_limit = kHopLimit;
  r.primary.local_ack_timeout = kLocalAckTimeout;
  std::array<uint8_t, kCmaHdrBytes> hdr{};
  SV_RETURN_IF_ERROR(PutCmaHdr(m, &hdr));
  std::copy(hdr.begin(), hdr.end(), r.private_data.begin());
  SV_RETURN_IF_ERROR(PutPrivate(m, kCmaHdrBytes, &r.private_data));
  return r;
}

Result<Rep> RepOf(const Message& m, const MadContext& ctx) {
  Rep r;
  r.local_comm_id = ctx.local_comm_id;
  r.remote_comm_id = ctx.remote_comm_id;
  r.local_qkey = m.qkey;
  r.local_qpn = m.qpn;
  r.starting_psn = m.psn;
  r.responder_resources = m.responder_resources;
  r.initiator_depth = m.initiator_depth;
  r.target_ack_delay = kTargetAckDelay;
  r.flow_control = m.flow_control;
  r.rnr_retry_count = std::min<uint8_t>(m.rnr_retry_count, 7);
  r.srq = m.srq;
  r.local_ca_guid = ctx.local_ca_guid;
  r.ece_vendor_id = m.ece.vendor_id & kEceVendorMask;  // CM_REP_VENDOR_ID_{H,M,L}
  SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
  return r;
}

Result<Body> BodyOf(const Message& m, const MadContext& ctx) {
  switch (m.type) {
    case MessageType::kReq: {
      auto r = ReqOf(m, ctx);
      if (!r.ok()) return r.status();
      return Body(std::move(r.value()));
    }
    case MessageType::kRep: {
      auto r = RepOf(m, ctx);
      if (!r.ok()) return r.status();
      return Body(r.value());
    }
    case MessageType::kRtu: {
      Rtu r{ctx.local_comm_id, ctx.remote_comm_id, {}};
      SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
      return Body(r);
    }
    case MessageType::kRej: {
      Rej r;
      r.local_comm_id = ctx.local_comm_id;
      r.remote_comm_id = ctx.remote_comm_id;
      r.reason = static_cast<uint16_t>(m.status);
      SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
      return Body(r);
    }
    case MessageType::kDreq: {
      Dreq r{ctx.local_comm_id, ctx.remote_comm_id, ctx.remote_qpn, {}};
      SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
      return Body(r);
    }
    case MessageType::kDrep: {
      Drep r{ctx.local_comm_id, ctx.remote_comm_id, {}};
      SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
      return Body(r);
    }
    case MessageType::kSidrReq: {
      SidrReq r{ctx.local_comm_id, kDefaultPkey, ctx.service_id, {}};
      std::array<uint8_t, kCmaHdrBytes> hdr{};
      SV_RETURN_IF_ERROR(PutCmaHdr(m, &hdr));
      std::copy(hdr.begin(), hdr.end(), r.private_data.begin());
      SV_RETURN_IF_ERROR(PutPrivate(m, kCmaHdrBytes, &r.private_data));
      return Body(r);
    }
    case MessageType::kSidrRep: {
      SidrRep r;
      r.request_id = ctx.remote_comm_id;  // the requester's ID, echoed
      r.status = static_cast<uint8_t>(m.status);
      r.qpn = m.qpn;
      r.service_id = ctx.service_id;
      r.qkey = m.qkey;
      // cm_format_sidr_rep: VENDOR_ID_L = bits 7:0, the 16-bit VENDOR_ID_H = bits 15:8 only.
      r.ece_vendor_id_l = static_cast<uint8_t>(m.ece.vendor_id & 0xff);
      r.ece_vendor_id_h = static_cast<uint16_t>((m.ece.vendor_id >> 8) & 0xff);
      SV_RETURN_IF_ERROR(PutPrivate(m, 0, &r.private_data));
      return Body(r);
    }
  }
  return Invalid("unknown CM message type");
}

}  // namespace

Result<Mad> MadOfMessage(const Message& m, const MadContext& ctx) {
  auto body = BodyOf(m, ctx);
  if (!body.ok()) return body.status();
  Mad mad;
  mad.hdr.tid = ctx.tid;
  // cm_format_mad_ece_hdr: REQ, REP and SIDR_REP carry the ECE options as the attribute
  // modifier; every other CM MAD sends 0 (cm_format_mad_hdr leaves it zero).
  if (m.type == MessageType::kReq || m.type == MessageType::kRep || m.type == MessageType::kSidrRep)
    mad.hdr.attr_mod = m.ece.options;
  mad.body = std::move(body.value());
  return mad;
}

namespace {

// REQ / SIDR_REQ: the cma_hdr gives the addresses and the active side's port; the listener's
// port comes from the service ID.
Status TakeCmaHdr(const std::array<uint8_t, kCmaHdrBytes>& bytes, uint64_t service_id, Message* m) {
  auto hdr = DecodeCmaHdr(bytes);
  if (!hdr.ok()) return hdr.status();
  PortSpace ps;
  uint16_t port = 0;
  if (!PortOfServiceId(service_id, &ps, &port).ok()) port = 0;
  m->src = StorageOf(hdr->src, hdr->ip_version, hdr->port);
  m->dst = StorageOf(hdr->dst, hdr->ip_version, port);
  return Status::Ok();
}

template <size_t N>
std::array<uint8_t, kCmaHdrBytes> HeadOf(const std::array<uint8_t, N>& pd) {
  std::array<uint8_t, kCmaHdrBytes> h{};
  std::copy_n(pd.begin(), kCmaHdrBytes, h.begin());
  return h;
}

}  // namespace

namespace {

// One function per MAD: the Message it stands for, and the identifiers it names (`c`, from the
// receiver's side: its own comm ID is the MAD's remote one).
Status Take(const Req& r, Message* m, MadContext* c) {
  m->type = MessageType::kReq;
  m->responder_resources = r.responder_resources;
  m->initiator_depth = r.initiator_depth;
  m->flow_control = r.flow_control;
  m->retry_count = r.retry_count;
  m->rnr_retry_count = r.rnr_retry_count;
  m->srq = r.srq;
  m->qpn = r.local_qpn;
  m->psn = r.starting_psn;
  m->qkey = r.local_qkey;
  m->gid = r.primary.local_gid;
  m->ece.vendor_id = r.ece_vendor_id;  // the options are the header's (MessageOfMad)
  SV_RETURN_IF_ERROR(TakeCmaHdr(HeadOf(r.private_data), r.service_id, m));
  GetPrivate(r.private_data, kCmaHdrBytes, m);
  c->remote_comm_id = r.local_comm_id;
  c->service_id = r.service_id;
  c->local_ca_guid = r.local_ca_guid;  // the sender's
  c->remote_gid = r.primary.remote_gid;
  c->path_mtu = r.path_mtu;
  return Status::Ok();
}

Status Take(const Rep& r, Message* m, MadContext* c) {
  m->type = MessageType::kRep;
  m->responder_resources = r.responder_resources;
  m->initiator_depth = r.initiator_depth;
  m->flow_control = r.flow_control;
  m->rnr_retry_count = r.rnr_retry_count;
  m->srq = r.srq;
  m->qpn = r.local_qpn;
  m->psn = r.starting_psn;
  m->qkey = r.local_qkey;
  m->ece.vendor_id = r.ece_vendor_id;
  GetPrivate(r.private_data, 0, m);
  c->local_comm_id = r.remote_comm_id;
  c->remote_comm_id = r.local_comm_id;
  c->local_ca_guid = r.local_ca_guid;  // the sender's
  return Status::Ok();
}

// RTU, DREQ, DREP: comm IDs and private data only (DREQ also the receiver's QPN).
template <typename T>
Status TakeComm(const T& r, MessageType type, Message* m, MadContext* c) {
  m->type = type;
  GetPrivate(r.private_data, 0, m);
  c->local_comm_id = r.remote_comm_id;
  c->remote_comm_id = r.local_comm_id;
  return Status::Ok();
}
Status Take(const Rtu& r, Message* m, MadContext* c) { return TakeComm(r, MessageType::kRtu, m, c); }
Status Take(const Drep& r, Message* m, MadContext* c) { return TakeComm(r, MessageType::kDrep, m, c); }
Status Take(const Dreq& r, Message* m, MadContext* c) {
  c->remote_qpn = r.remote_qpn;
  return TakeComm(r, MessageType::kDreq, m, c);
}
Status Take(const Rej& r, Message* m, MadContext* c) {
  m->status = r.reason;
  return TakeComm(r, MessageType::kRej, m, c);
}

Status Take(const SidrReq& r, Message* m, MadContext* c) {
  m->type = MessageType::kSidrReq;
  SV_RETURN_IF_ERROR(TakeCmaHdr(HeadOf(r.private_data), r.service_id, m));
  GetPrivate(r.private_data, kCmaHdrBytes, m);
  c->remote_comm_id = r.request_id;
  c->service_id = r.service_id;
  return Status::Ok();
}

Status Take(const SidrRep& r, Message* m, MadContext* c) {
  m->type = MessageType::kSidrRep;
  m->status = r.status;
  m->qpn = r.qpn;
  m->qkey = r.qkey;
  GetPrivate(r.private_data, 0, m);
  c->local_comm_id = r.request_id;
  c->service_id = r.service_id;
  return Status::Ok();
}

Status Take(const Mra&, Message*, MadContext*) {
  return NotSupported("an MRA has no same-host message: it only extends the sender's REQ/REP timer (IBA 12.6.6)");
}

}  // namespace

Result<Message> MessageOfMad(const Mad& mad, MadContext* ctx) {
  // Message has no equivalent of: comm IDs, TID, service ID, CA GUID, the path (LIDs, P_Key,
  // MTU, flow label, traffic class, hop limit, SL, timeouts), the EECNs, max CM retries,
  // MRA, REJ's ARI and rejected-message field, SIDR_REP's additional info. `ctx` keeps the
  // identifiers; the rest is the conduit's (docs/cm.md, "Across hosts").
  Message m;
  MadContext c;
  c.tid = mad.hdr.tid;
  SV_RETURN_IF_ERROR(std::visit([&](const auto& body) { return Take(body, &m, &c); }, mad.body));
  // ECE options: the attribute modifier of a REQ / REP (cm_format_req_event, cm_format_rep_event
  // read it; the kernel reads no ECE from a SIDR_REP, and neither does this).
  if (m.type == MessageType::kReq || m.type == MessageType::kRep) m.ece.options = mad.hdr.attr_mod;
  if (ctx != nullptr) *ctx = c;
  return m;
}

}  // namespace softverbs::cm::mad
