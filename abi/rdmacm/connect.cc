// librdmacm's address, route and connection verbs: arguments → cm::Id calls under the channel
// lock, Status → "-1 and errno" (rdma_cm(7)), and the synchronous mode's waits.
#include <cerrno>
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/rdmacm/objects.h"
#include "abi/rdmacm/refuse.h"
#include "abi/rdmacm/sync.h"
#include "base/log.h"

namespace softverbs::abi::rdmacm {

Status CompleteSync(CmId* id) {
  if (!id->sync) return Status::Ok();
  Result<rdma_cm_event*> got = NextEvent(id->channel);
  if (!got.ok()) return got.status();
  rdma_cm_event* event = got.value();
  int status = event->status;
  rdma_cm_event_type type = event->event;
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST && id->pub.event == nullptr) {
    // Kept for rdma_get_request; acknowledged with the new identifier.
  }
  (void)AckEvent(event);
  if (type == RDMA_CM_EVENT_REJECTED)
    return Status(ECONNREFUSED, "the connection was rejected (status " + std::to_string(status) + ")");
  if (status != 0) {
    int code = status < 0 ? -status : status;
    return Status(code, std::string(rdma_event_str(type)) + " (status " + std::to_string(status) + ")");
  }
  return Status::Ok();
}

namespace {

// Runs `verb` on the identifier's cm::Id under its channel's lock, then refreshes the public
// fields and, for a synchronous identifier, waits for the event it causes.
template <typename F>
int Run(const char* name, rdma_cm_id* id, bool waits, F verb) {
  try {
    CmId* ours = Lookup(id);
    if (ours == nullptr) return ReturnMinusOne(name, {}, Invalid(kNotOurs));
    Status s;
    {
      std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
      SV_LOG(kDebug, "%s(%s) in state %s", name, IdName(id).c_str(),
             cm::IdStateName(ours->core->state()));
      s = verb(ours);
      SyncPublicFields(ours);
    }
    if (s.ok() && waits) s = CompleteSync(ours);
    if (!s.ok()) return ReturnMinusOne(name, IdName(id), s);
    SyncPublicFields(ours);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

Status CheckAddress(const sockaddr* addr, const char* what) {
  if (addr == nullptr) return Invalid(std::string(what) + " is NULL");
  if (!cm::IsIpFamily(addr))
    return Status(EAFNOSUPPORT, std::string(what) + " family " + std::to_string(addr->sa_family) +
                                    " is not AF_INET or AF_INET6 (AF_IB is not supported)");
  return Status::Ok();
}

// rdma_conn_param → cm::ConnParam; resources clamped or refused like rdma-core's
// ucma_valid_param: RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH mean "the device's maximum", any
// other value above it is EINVAL.
Result<cm::ConnParam> ToParam(const rdma_conn_param* param, const cm::ConnParam& defaults) {
  if (param == nullptr) return defaults;
  cm::ConnParam p;
  if (param->private_data_len > 0 && param->private_data == nullptr)
    return Invalid("private_data is NULL with private_data_len " + std::to_string(param->private_data_len));
  if (param->private_data_len > 0) {
    auto* bytes = static_cast<const uint8_t*>(param->private_data);
    p.private_data.assign(bytes, bytes + param->private_data_len);
  }
  p.responder_resources = param->responder_resources == RDMA_MAX_RESP_RES
                              ? MaxResponderResources() : param->responder_resources;
  p.initiator_depth = param->initiator_depth == RDMA_MAX_INIT_DEPTH
                          ? MaxInitiatorDepth() : param->initiator_depth;
  if (p.responder_resources > MaxResponderResources())
    return Invalid("responder_resources " + std::to_string(p.responder_resources) +
                   " exceeds the device's max_qp_rd_atom " + std::to_string(MaxResponderResources()));
  if (p.initiator_depth > MaxInitiatorDepth())
    return Invalid("initiator_depth " + std::to_string(p.initiator_depth) +
                   " exceeds the device's max_qp_init_rd_atom " + std::to_string(MaxInitiatorDepth()));
  p.flow_control = param->flow_control;
  p.retry_count = std::min<uint8_t>(param->retry_count, 7);      // 3-bit fields of REQ/REP
  p.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
  p.srq = param->srq;
  p.qp_num = param->qp_num & 0xffffff;
  return p;
}

}  // namespace
}  // namespace softverbs::abi::rdmacm

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::Invalid;
using softverbs::Result;
using softverbs::Status;
using softverbs::abi::LogRefusal;
using softverbs::abi::ReturnMinusOne;
using softverbs::abi::ReturnNull;

// --- addresses and routes -----------------------------------------------------------------------

// support: rdma_bind_addr | implemented | IPv4/IPv6, wildcard or an address of this host (else EADDRNOTAVAIL); port 0 = ephemeral
SV_EXPORT int rdma_bind_addr(struct rdma_cm_id* id, struct sockaddr* addr) {
  return rdmacm::Run("rdma_bind_addr", id, false, [&](rdmacm::CmId* ours) -> Status {
    SV_RETURN_IF_ERROR(rdmacm::CheckAddress(addr, "addr"));
    Result<softverbs::cm::DeviceView> device = rdmacm::DeviceView();
    if (!device.ok()) return device.status();
    return ours->core->BindAddr(addr, device.value());
  });
}

// support: rdma_resolve_addr | implemented | every address of this host (127.0.0.1, ::1, interfaces) → softverbs0 port 1 and its GID index; another host's → the routing's source address, which must be a softverbs0 GID (the CM then speaks MADs on QP1), else ADDR_ERROR -EHOSTUNREACH (no route: -ENETUNREACH)
SV_EXPORT int rdma_resolve_addr(struct rdma_cm_id* id, struct sockaddr* src_addr,
                                struct sockaddr* dst_addr, int /*timeout_ms*/) {
  return rdmacm::Run("rdma_resolve_addr", id, true, [&](rdmacm::CmId* ours) -> Status {
    SV_RETURN_IF_ERROR(rdmacm::CheckAddress(dst_addr, "dst_addr"));
    if (src_addr != nullptr) SV_RETURN_IF_ERROR(rdmacm::CheckAddress(src_addr, "src_addr"));
    Result<softverbs::cm::DeviceView> device = rdmacm::DeviceView();
    if (!device.ok()) return device.status();
    return ours->core->ResolveAddr(src_addr, dst_addr, device.value());
  });
}

// support: rdma_resolve_route | implemented | one path record (this host's port), ROUTE_RESOLVED
SV_EXPORT int rdma_resolve_route(struct rdma_cm_id* id, int /*timeout_ms*/) {
  return rdmacm::Run("rdma_resolve_route", id, true,
                     [&](rdmacm::CmId* ours) { return ours->core->ResolveRoute(); });
}

// support: rdma_get_src_port | implemented | the bound port in network order; 0 when not bound
SV_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id* id) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr) {
    LogRefusal("rdma_get_src_port", {}, Invalid(rdmacm::kNotOurs));
    return 0;
  }
  return htons(softverbs::cm::PortOf(&id->route.addr.src_addr));
}

// support: rdma_get_dst_port | implemented | the peer's port in network order; 0 when not connected
SV_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id* id) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr) {
    LogRefusal("rdma_get_dst_port", {}, Invalid(rdmacm::kNotOurs));
    return 0;
  }
  return htons(softverbs::cm::PortOf(&id->route.addr.dst_addr));
}

// support: rdma_set_option | implemented | ID_TOS (GRH traffic class), ID_REUSEADDR (accepted: no TIME_WAIT to reuse), ID_AFONLY, ID_ACK_TIMEOUT; IB_PATH → EOPNOTSUPP
SV_EXPORT int rdma_set_option(struct rdma_cm_id* id, int level, int optname, void* optval,
                              size_t optlen) {
  return rdmacm::Run("rdma_set_option", id, false, [&](rdmacm::CmId* ours) -> Status {
    if (optval == nullptr) return Invalid("optval is NULL");
    if (level == RDMA_OPTION_IB)
      return softverbs::NotSupported("RDMA_OPTION_IB_PATH: path records are not settable on RoCE here");
    if (level != RDMA_OPTION_ID) return Invalid("level " + std::to_string(level) + " is unknown");
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return Invalid("RDMA_OPTION_ID_TOS takes a uint8_t");
        ours->core->set_tos(*static_cast<uint8_t*>(optval));
        return Status::Ok();
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return Invalid("RDMA_OPTION_ID_REUSEADDR takes an int");
        return Status::Ok();
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return Invalid("RDMA_OPTION_ID_AFONLY takes an int");
        if (ours->core->state() != softverbs::cm::IdState::kIdle)
          return Invalid("RDMA_OPTION_ID_AFONLY must be set before rdma_bind_addr");
        ours->core->set_afonly(*static_cast<int*>(optval) != 0);
        return Status::Ok();
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return Invalid("RDMA_OPTION_ID_ACK_TIMEOUT takes a uint8_t");
        ours->core->set_ack_timeout(std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31));
        return Status::Ok();
      default:
        return Invalid("RDMA_OPTION_ID option " + std::to_string(optname) + " is unknown");
    }
  });
}

// --- connections --------------------------------------------------------------------------------

// support: rdma_listen | implemented | on a bound id; a wildcard listens on every address of the host
SV_EXPORT int rdma_listen(struct rdma_cm_id* id, int backlog) {
  return rdmacm::Run("rdma_listen", id, false, [&](rdmacm::CmId* ours) -> Status {
    Result<softverbs::cm::DeviceView> device = rdmacm::DeviceView();
    if (!device.ok()) return device.status();
    return ours->core->Listen(backlog, device.value());
  });
}

// support: rdma_connect | implemented | REQ (UD: SIDR_REQ); QP moved to RTR/RTS on REP; nobody listening → REJECTED status 8 (UD: UNREACHABLE status 2)
SV_EXPORT int rdma_connect(struct rdma_cm_id* id, struct rdma_conn_param* conn_param) {
  return rdmacm::Run("rdma_connect", id, true, [&](rdmacm::CmId* ours) -> Status {
    // rdma_connect(3) with no conn_param: the device's maximum resources and 7 retries.
    softverbs::cm::ConnParam defaults;
    defaults.responder_resources = rdmacm::MaxResponderResources();
    defaults.initiator_depth = rdmacm::MaxInitiatorDepth();
    defaults.retry_count = 7;
    defaults.rnr_retry_count = 7;
    Result<softverbs::cm::ConnParam> param = rdmacm::ToParam(conn_param, defaults);
    if (!param.ok()) return param.status();
    // The REQ's ECE is the local one (librdmacm ucma_copy_ece_param_to_kern_req).
    param->ece = {ours->local_ece.vendor_id, ours->local_ece.options};
    return ours->core->Connect(param.value());
  });
}

// support: rdma_accept | implemented | RTR/RTS then REP (UD: SIDR_REP with QPN and Q_Key); ESTABLISHED on RTU
SV_EXPORT int rdma_accept(struct rdma_cm_id* id, struct rdma_conn_param* conn_param) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  bool ud = ours != nullptr && ours->core->ud();
  int rc = rdmacm::Run("rdma_accept", id, !ud, [&](rdmacm::CmId* ours) -> Status {
    // No conn_param: the request's own values, within the device's (rdma-core's defaults).
    const softverbs::cm::Message& req = ours->core->peer();
    softverbs::cm::ConnParam defaults;
    defaults.responder_resources = std::min(req.initiator_depth, rdmacm::MaxResponderResources());
    defaults.initiator_depth = std::min(req.responder_resources, rdmacm::MaxInitiatorDepth());
    defaults.retry_count = 7;
    defaults.rnr_retry_count = 7;
    Result<softverbs::cm::ConnParam> param = rdmacm::ToParam(conn_param, defaults);
    if (!param.ok()) return param.status();
    // The REP answers with the vendor ID received and the local options
    // (ucma_copy_ece_param_to_kern_rep: "Return result with same ID as received").
    param->ece = {ours->remote_ece.vendor_id, ours->local_ece.options};
    return ours->core->Accept(param.value());
  });
  if (rc == 0 && ours != nullptr && ours->sync_event != nullptr) {
    (void)rdmacm::AckEvent(ours->sync_event);
    ours->sync_event = nullptr;
    id->event = nullptr;
  }
  return rc;
}

namespace softverbs::abi::rdmacm {
namespace {
int RejectWith(const char* verb, rdma_cm_id* id, const void* private_data, uint8_t private_data_len,
               int reason) {
  return Run(verb, id, false, [&](CmId* ours) -> Status {
    if (private_data_len > 0 && private_data == nullptr)
      return Invalid("private_data is NULL with private_data_len " + std::to_string(private_data_len));
    auto* bytes = static_cast<const uint8_t*>(private_data);
    std::vector<uint8_t> data;
    if (private_data_len > 0) data.assign(bytes, bytes + private_data_len);
    return ours->core->Reject(data, reason);
  });
}
}  // namespace
}  // namespace softverbs::abi::rdmacm

// support: rdma_reject | implemented | REJ reason 28 (consumer defined) with up to 148 bytes of private data; UD: SIDR_REP status 1
SV_EXPORT int rdma_reject(struct rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdmacm::RejectWith("rdma_reject", id, private_data, private_data_len,
                            softverbs::cm::kRejConsumerDefined);
}

// rdma_reject_ece has no man page of its own: "The same as rdma_reject()" (rdma_cma.h) with
// the reason the IBA gives an unsupported vendor option (rdma-core's reject_with_reason(id,
// ..., 35): IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED); the peer's REJECTED carries status 35.
// support: rdma_reject_ece | implemented | REJ reason 35 (vendor option not supported); UD: SIDR_REP status 1
SV_EXPORT int rdma_reject_ece(struct rdma_cm_id* id, const void* private_data,
                              uint8_t private_data_len) {
  return rdmacm::RejectWith("rdma_reject_ece", id, private_data, private_data_len,
                            softverbs::cm::kRejVendorOptionNotSupported);
}

// support: rdma_establish | implemented | sends RTU for an id without QP after CONNECT_RESPONSE
SV_EXPORT int rdma_establish(struct rdma_cm_id* id) {
  return rdmacm::Run("rdma_establish", id, false,
                     [&](rdmacm::CmId* ours) { return ours->core->Establish(); });
}

// support: rdma_disconnect | implemented | QP → ERR, DREQ; both sides get DISCONNECTED
SV_EXPORT int rdma_disconnect(struct rdma_cm_id* id) {
  // A synchronous identifier waits for its DISCONNECTED when a DREQ leaves (rdma-core's
  // rdma_disconnect completes like connect); one already disconnected has nothing to wait for.
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  bool sends = false;
  if (ours != nullptr) {
    std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
    softverbs::cm::IdState state = ours->core->state();
    sends = state == softverbs::cm::IdState::kConnected ||
            state == softverbs::cm::IdState::kConnectResponse ||
            state == softverbs::cm::IdState::kAccepting;
  }
  return rdmacm::Run("rdma_disconnect", id, sends,
                     [&](rdmacm::CmId* ours) { return ours->core->Disconnect(); });
}

// support: rdma_notify | implemented | IBV_EVENT_COMM_EST establishes a connection waiting for RTU; other events are accepted and ignored
SV_EXPORT int rdma_notify(struct rdma_cm_id* id, enum ibv_event_type event) {
  return rdmacm::Run("rdma_notify", id, false, [&](rdmacm::CmId* ours) -> Status {
    if (event != IBV_EVENT_COMM_EST) return Status::Ok();
    return ours->core->NotifyCommEstablished();
  });
}

// rdma_set_local_ece(3) / rdma_get_remote_ece(3) are for "users of external QPs" (rdma-core
// cma.c refuses both on an identifier with a QP, where the CM runs the ECE handshake itself).
// support: rdma_set_local_ece | implemented | the vendor ID and options the next REQ / REP carries; EINVAL on an id with a QP, vendor_id 0 or comp_mask != 0 (as rdma-core)
SV_EXPORT int rdma_set_local_ece(struct rdma_cm_id* id, struct ibv_ece* ece) {
  return rdmacm::Run("rdma_set_local_ece", id, false, [&](rdmacm::CmId* ours) -> Status {
    if (ours->pub.qp != nullptr)
      return Invalid("the identifier has a QP: the CM sets its ECE itself (rdma_set_local_ece(3) is for external QPs)");
    if (ece == nullptr) return Invalid("ece is NULL");
    if (ece->vendor_id == 0) return Invalid("vendor_id is 0 (librdmacm rdma_set_local_ece)");
    if (ece->comp_mask != 0)
      return Invalid("comp_mask " + std::to_string(ece->comp_mask) + " is not 0 (librdmacm rdma_set_local_ece)");
    ours->local_ece.vendor_id = ece->vendor_id;
    ours->local_ece.options = ece->options;
    return Status::Ok();
  });
}

// support: rdma_get_remote_ece | implemented | the vendor ID and options of the peer's REQ / REP (0 before one arrived); EINVAL on an id with a QP (as rdma-core)
SV_EXPORT int rdma_get_remote_ece(struct rdma_cm_id* id, struct ibv_ece* ece) {
  return rdmacm::Run("rdma_get_remote_ece", id, false, [&](rdmacm::CmId* ours) -> Status {
    if (ours->pub.qp != nullptr)
      return Invalid("the identifier has a QP: the CM applied the peer's ECE to it (rdma_get_remote_ece(3) is for external QPs)");
    if (ece == nullptr) return Invalid("ece is NULL");
    ece->vendor_id = ours->remote_ece.vendor_id;
    ece->options = ours->remote_ece.options;
    ece->comp_mask = 0;
    return Status::Ok();
  });
}
