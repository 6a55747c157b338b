// librdmacm's event channels, identifiers and events: rdma-core structs ↔ cm/ objects. The
// protocol and the state machine live in cm/ (docs/cm.md); this file converts and answers in
// the verbs' convention ("0 on success, or -1 on error ... errno", rdma_cm(7)).
#include <cerrno>
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/rdmacm/objects.h"
#include "abi/rdmacm/qp.h"
#include "abi/rdmacm/refuse.h"
#include "abi/rdmacm/sync.h"
#include "base/log.h"

namespace softverbs::abi::rdmacm {
namespace {

static_assert(static_cast<int>(cm::EventType::kTimewaitExit) == RDMA_CM_EVENT_TIMEWAIT_EXIT);
static_assert(static_cast<int>(cm::EventType::kConnectRequest) == RDMA_CM_EVENT_CONNECT_REQUEST);
static_assert(static_cast<int>(cm::EventType::kDisconnected) == RDMA_CM_EVENT_DISCONNECTED);
static_assert(static_cast<int>(cm::PortSpace::kTcp) == RDMA_PS_TCP);
static_assert(static_cast<int>(cm::PortSpace::kUdp) == RDMA_PS_UDP);

// The rdma_cm_id of a request's new identifier, made when CONNECT_REQUEST is delivered.
CmId* WrapChild(cm::Id* child, CmChannel* channel) {
  auto* id = new CmId();
  id->core = child;
  id->channel = channel;
  cm::Id* listener = child->listener();
  CmId* parent = listener != nullptr ? static_cast<CmId*>(listener->user()) : nullptr;
  id->pub.channel = &channel->pub;
  id->pub.context = parent != nullptr ? parent->pub.context : nullptr;
  id->pub.ps = static_cast<rdma_port_space>(child->port_space());
  id->pub.qp_type = child->ud() ? IBV_QPT_UD : IBV_QPT_RC;
  child->set_user(id);
  SyncPublicFields(id);
  Register(id);
  return id;
}

}  // namespace

Result<rdma_cm_event*> NextEvent(CmChannel* channel) {
  Result<cm::Event> got = channel->core->Get();
  if (!got.ok()) return got.status();
  cm::Event& e = got.value();
  auto* event = new CmEvent();
  CmId* id = e.id != nullptr ? static_cast<CmId*>(e.id->user()) : nullptr;
  if (id == nullptr && e.id != nullptr) id = WrapChild(e.id, channel);
  if (id != nullptr) SyncPublicFields(id);
  event->pub.id = id != nullptr ? &id->pub : nullptr;
  event->pub.listen_id =
      e.listen_id != nullptr ? &static_cast<CmId*>(e.listen_id->user())->pub : nullptr;
  event->pub.event = static_cast<rdma_cm_event_type>(e.type);
  event->pub.status = e.status;
  // The peer's ECE (librdmacm: ucma_process_conn_req; CONNECT_RESPONSE of an id without QP).
  if (id != nullptr && (e.type == cm::EventType::kConnectRequest || e.type == cm::EventType::kConnectResponse))
    id->remote_ece = {e.conn.ece.vendor_id, e.conn.ece.options, 0};
  event->private_data = e.conn.private_data;
  const void* data = event->private_data.empty() ? nullptr : event->private_data.data();
  auto len = static_cast<uint8_t>(event->private_data.size());
  if (e.ud) {
    rdma_ud_param& ud = event->pub.param.ud;
    ud.private_data = data;
    ud.private_data_len = len;
    // RoCE: the address vector of the remote UD QP carries a GRH (DESIGN.md 3).
    ud.ah_attr.is_global = 1;
    memcpy(ud.ah_attr.grh.dgid.raw, e.ud_param.dgid.data(), 16);
    ud.ah_attr.grh.sgid_index = e.ud_param.sgid_index;
    ud.ah_attr.grh.hop_limit = 64;
    ud.ah_attr.port_num = e.ud_param.port_num;
    ud.qp_num = e.ud_param.qp_num;
    ud.qkey = e.ud_param.qkey;
    if (e.type == cm::EventType::kMulticastJoin || e.type == cm::EventType::kMulticastError) {
      // rdma_join_multicast(3): "The context is returned to the user through the private_data
      // field in the rdma_cm_event."
      ud.private_data = e.join_context;
      ud.private_data_len = 0;
    }
  } else {
    rdma_conn_param& c = event->pub.param.conn;
    c.private_data = data;
    c.private_data_len = len;
    // Within what this device can serve, so the values can go back to rdma_accept as they are.
    c.responder_resources = std::min(e.conn.responder_resources, MaxResponderResources());
    c.initiator_depth = std::min(e.conn.initiator_depth, MaxInitiatorDepth());
    c.flow_control = e.conn.flow_control;
    c.retry_count = e.conn.retry_count;
    c.rnr_retry_count = e.conn.rnr_retry_count;
    c.srq = e.conn.srq;
    c.qp_num = e.conn.qp_num;
  }
  Register(event);
  SV_LOG(kDebug, "rdma_get_cm_event: %s status %d for %s", rdma_event_str(event->pub.event),
         event->pub.status, IdName(event->pub.id).c_str());
  return &event->pub;
}

Status AckEvent(rdma_cm_event* pub) {
  auto* event = reinterpret_cast<CmEvent*>(pub);
  if (pub == nullptr) return Invalid("event is NULL");
  if (!Unregister(event)) return Invalid("event was not returned by rdma_get_cm_event or is acked");
  if (pub->id != nullptr) {
    CmId* id = reinterpret_cast<CmId*>(pub->id);
    id->core->channel()->Acknowledge(id->core);
  }
  delete event;
  return Status::Ok();
}

}  // namespace softverbs::abi::rdmacm

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::Invalid;
using softverbs::Result;
using softverbs::Status;
using softverbs::abi::LogRefusal;
using softverbs::abi::ReturnMinusOne;
using softverbs::abi::ReturnNull;

// --- event channel and events -------------------------------------------------------------------

// support: rdma_create_event_channel | implemented | fd is an epoll set: readable exactly when an event can be read; O_NONBLOCK → EAGAIN
SV_EXPORT struct rdma_event_channel* rdma_create_event_channel(void) {
  try {
    Result<std::unique_ptr<softverbs::cm::Channel>> core = softverbs::cm::Channel::Create();
    if (!core.ok()) return ReturnNull<rdma_event_channel>("rdma_create_event_channel", {}, core.status());
    auto* channel = new rdmacm::CmChannel();
    channel->core = std::move(core.value());
    channel->pub.fd = channel->core->fd();
    rdmacm::Register(channel);
    return &channel->pub;
  } catch (...) {
    errno = ENOMEM;
    return nullptr;
  }
}

// support: rdma_destroy_event_channel | implemented | refused (logged) while ids still use it
SV_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel* channel) {
  rdmacm::CmChannel* ours = rdmacm::Lookup(channel);
  if (ours == nullptr) {
    LogRefusal("rdma_destroy_event_channel", {}, Invalid("channel is NULL or not softverbs'"));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(ours->core->mutex());
    // rdma_destroy_event_channel(3): "All rdma_cm_id's associated with the event channel must
    // be destroyed" first; freeing it under them would leave them dangling.
    if (ours->core->ids() != 0) {
      LogRefusal("rdma_destroy_event_channel", {},
                 Invalid(std::to_string(ours->core->ids()) + " rdma_cm_id(s) still use the channel"));
      return;
    }
  }
  rdmacm::Unregister(ours);
  delete ours;
}

// support: rdma_get_cm_event | implemented | runs the CM protocol of the channel's ids; blocks unless the fd is O_NONBLOCK
SV_EXPORT int rdma_get_cm_event(struct rdma_event_channel* channel, struct rdma_cm_event** event) {
  try {
    rdmacm::CmChannel* ours = rdmacm::Lookup(channel);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_get_cm_event", {}, Invalid("channel is NULL or not softverbs'"));
    if (event == nullptr) return ReturnMinusOne("rdma_get_cm_event", {}, Invalid("event is NULL"));
    Result<rdma_cm_event*> got = rdmacm::NextEvent(ours);
    if (!got.ok()) {
      // EAGAIN on a non-blocking channel is the normal "nothing yet": set errno, no log line.
      if (got.status().code() == EAGAIN) {
        errno = EAGAIN;
        return -1;
      }
      return ReturnMinusOne("rdma_get_cm_event", {}, got.status());
    }
    *event = got.value();
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// support: rdma_ack_cm_event | implemented | frees the event; EINVAL for NULL or an event not returned/already acked
SV_EXPORT int rdma_ack_cm_event(struct rdma_cm_event* event) {
  try {
    Status s = rdmacm::AckEvent(event);
    if (!s.ok()) return ReturnMinusOne("rdma_ack_cm_event", {}, s);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// rdma_event_str(3): "a pointer to a static character string corresponding to the event".
// support: rdma_event_str | implemented | the enum name; "UNKNOWN EVENT" otherwise
SV_EXPORT const char* rdma_event_str(enum rdma_cm_event_type event) {
  // Indexed by the enum value (0..15 in rdma_cma.h).
  static constexpr const char* kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",   "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",         "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",     "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",      "RDMA_CM_EVENT_TIMEWAIT_EXIT",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == RDMA_CM_EVENT_TIMEWAIT_EXIT + 1);
  // The caller may pass any int cast to the enum; compare as unsigned to reject negatives too.
  auto index = static_cast<unsigned>(event);
  if (index < sizeof(kNames) / sizeof(kNames[0])) return kNames[index];
  return "UNKNOWN EVENT";
}

// --- identifiers --------------------------------------------------------------------------------

// support: rdma_create_id | implemented | RDMA_PS_TCP/IB (RC, UC QPs), RDMA_PS_UDP/IPOIB (UD); NULL channel = synchronous id
SV_EXPORT int rdma_create_id(struct rdma_event_channel* channel, struct rdma_cm_id** id,
                             void* context, enum rdma_port_space ps) {
  try {
    if (id == nullptr) return ReturnMinusOne("rdma_create_id", {}, Invalid("id is NULL"));
    bool ud;
    switch (ps) {
      case RDMA_PS_TCP: case RDMA_PS_IB: ud = false; break;
      case RDMA_PS_UDP: case RDMA_PS_IPOIB: ud = true; break;
      default:
        return ReturnMinusOne("rdma_create_id", {},
                              Status(EPROTONOSUPPORT, "port space " + std::to_string(ps) +
                                                          " is not TCP, UDP, IB or IPOIB"));
    }
    rdmacm::CmChannel* ours = nullptr;
    bool owns = false;
    if (channel == nullptr) {
      // rdma_create_id(3): "If the channel is NULL, the rdma_cm_id will be placed into
      // synchronous operation": a private channel each verb waits on.
      rdma_event_channel* own = rdma_create_event_channel();
      if (own == nullptr) return -1;
      ours = rdmacm::Lookup(own);
      owns = true;
    } else {
      ours = rdmacm::Lookup(channel);
      if (ours == nullptr)
        return ReturnMinusOne("rdma_create_id", {}, Invalid("channel is not an rdma_event_channel of softverbs"));
    }
    auto* wrapper = new rdmacm::CmId();
    wrapper->channel = ours;
    wrapper->sync = owns;
    wrapper->owns_channel = owns;
    {
      std::lock_guard<std::mutex> lock(ours->core->mutex());
      wrapper->core = new softverbs::cm::Id(ours->core.get(), static_cast<softverbs::cm::PortSpace>(ps), ud);
      wrapper->core->set_user(wrapper);
    }
    wrapper->pub.channel = &ours->pub;
    wrapper->pub.context = context;
    wrapper->pub.ps = ps;
    wrapper->pub.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC;
    rdmacm::Register(wrapper);
    *id = &wrapper->pub;
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

namespace softverbs::abi::rdmacm {

void DestroyId(CmId* id) {
  SV_LOG(kDebug, "rdma_destroy_id(%s)", IdName(&id->pub).c_str());
  Unregister(id);
  if (id->sync_event != nullptr) (void)AckEvent(id->sync_event);
  CmChannel* channel = id->channel;
  {
    std::unique_lock<std::mutex> lock(id->core->channel()->mutex());
    id->core->channel()->WaitAcknowledged(id->core, lock);
    id->core->Close();  // leaves the multicast groups, with the QP (if any) still known
    id->core->AttachQp(nullptr);
  }
  delete id->core;
  if (id->owns_channel) {
    Unregister(channel);
    delete channel;
  }
  delete id;
}

}  // namespace softverbs::abi::rdmacm

// support: rdma_destroy_id | implemented | waits for the id's events to be acked (rdma_get_cm_event(3)); a QP still attached is left to the caller; an established connection not disconnected sends its DREQ (as the kernel's CM), and a process that dies has its connections' DREQs sent by its guard (docs/cm.md)
SV_EXPORT int rdma_destroy_id(struct rdma_cm_id* id) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr) return ReturnMinusOne("rdma_destroy_id", {}, Invalid(rdmacm::kNotOurs));
    rdmacm::DestroyId(ours);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// support: rdma_migrate_id | implemented | moves the id and its queued events; NULL channel makes it synchronous
SV_EXPORT int rdma_migrate_id(struct rdma_cm_id* id, struct rdma_event_channel* channel) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr) return ReturnMinusOne("rdma_migrate_id", {}, Invalid(rdmacm::kNotOurs));
    rdmacm::CmChannel* target = nullptr;
    bool owns = false;
    if (channel == nullptr) {
      rdma_event_channel* own = rdma_create_event_channel();
      if (own == nullptr) return -1;
      target = rdmacm::Lookup(own);
      owns = true;
    } else {
      target = rdmacm::Lookup(channel);
      if (target == nullptr)
        return ReturnMinusOne("rdma_migrate_id", rdmacm::IdName(id),
                              Invalid("channel is not an rdma_event_channel of softverbs"));
    }
    rdmacm::CmChannel* old = ours->channel;
    if (old != target) {
      std::scoped_lock lock(old->core->mutex(), target->core->mutex());
      ours->core->MoveTo(target->core.get());
    }
    if (ours->owns_channel && old != target) {
      rdmacm::Unregister(old);
      delete old;
    }
    ours->channel = target;
    ours->owns_channel = owns;
    ours->sync = owns;
    id->channel = &target->pub;
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}
