// The convenience layer of librdmacm: rdma_getaddrinfo(3), rdma_create_ep(3) /
// rdma_destroy_ep, rdma_get_request(3), rdma_get_devices(3), rdma_create_srq(3).
#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "abi/common/errno_convention.h"
#include "base/log.h"
#include "abi/rdmacm/objects.h"
#include "abi/rdmacm/refuse.h"
#include "abi/rdmacm/sync.h"

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::Invalid;
using softverbs::Result;
using softverbs::Status;
using softverbs::abi::LogRefusal;
using softverbs::abi::ReturnMinusOne;
using softverbs::abi::ReturnNull;

namespace {

std::mutex g_lists_mutex;
std::unordered_set<void*> g_lists;  // device lists and address lists handed out

sockaddr* CopyAddress(const sockaddr* addr, socklen_t* len) {
  *len = softverbs::cm::AddressLength(addr);
  auto* copy = static_cast<sockaddr*>(calloc(1, *len));
  if (copy != nullptr) memcpy(copy, addr, *len);
  return copy;
}

void FreeList(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

// getaddrinfo(3)'s failures in the errno convention rdma_getaddrinfo(3) documents.
int ErrnoOf(int eai) {
  switch (eai) {
    case EAI_NONAME: return ENOENT;
    case EAI_AGAIN: return EAGAIN;
    case EAI_MEMORY: return ENOMEM;
    case EAI_FAMILY: return EAFNOSUPPORT;
    case EAI_SERVICE: return ESRCH;
    case EAI_SYSTEM: return errno;
    default: return EINVAL;
  }
}

void Remember(rdma_addrinfo* head) {
  std::lock_guard l(g_lists_mutex);
  g_lists.insert(head);
}

int FromHints(const rdma_addrinfo& hints, rdma_addrinfo** res) {
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) return ReturnMinusOne("rdma_getaddrinfo", {}, softverbs::NoMemory("no memory for the result"));
  r->ai_flags = hints.ai_flags;
  r->ai_family = hints.ai_family;
  r->ai_qp_type = hints.ai_qp_type;
  r->ai_port_space = hints.ai_port_space;
  if (hints.ai_dst_addr != nullptr && softverbs::cm::IsIpFamily(hints.ai_dst_addr))
    r->ai_dst_addr = CopyAddress(hints.ai_dst_addr, &r->ai_dst_len);
  if (hints.ai_src_addr != nullptr && softverbs::cm::IsIpFamily(hints.ai_src_addr)) {
    r->ai_src_addr = CopyAddress(hints.ai_src_addr, &r->ai_src_len);
  } else if (r->ai_dst_addr != nullptr && !(hints.ai_flags & (RAI_PASSIVE | RAI_NOROUTE))) {
    sockaddr_storage src = softverbs::cm::AnySourceFor(r->ai_dst_addr);  // as for a named node
    r->ai_src_addr = CopyAddress(reinterpret_cast<sockaddr*>(&src), &r->ai_src_len);
  }
  Remember(r);
  *res = r;
  return 0;
}

}  // namespace

// support: rdma_getaddrinfo | implemented | IPv4/IPv6 names and services through getaddrinfo(3); RAI_PASSIVE, RAI_NUMERICHOST, RAI_FAMILY; active results carry the source address the host would use; neither node nor service: the hints' own addresses
SV_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                               const struct rdma_addrinfo* hints, struct rdma_addrinfo** res) {
  try {
    if (res == nullptr) return ReturnMinusOne("rdma_getaddrinfo", {}, Invalid("res is NULL"));
    *res = nullptr;
    if (node == nullptr && service == nullptr && hints == nullptr)
      return ReturnMinusOne("rdma_getaddrinfo", {}, Invalid("node, service and hints are all NULL"));
    int flags = hints != nullptr ? hints->ai_flags : 0;
    if (hints != nullptr && hints->ai_family == AF_IB)
      return ReturnMinusOne("rdma_getaddrinfo", {},
                            Status(EAFNOSUPPORT, "AF_IB addresses are not supported (RoCE device)"));
    // Neither node nor service: the result is the hints' own addresses (rdma-core's
    // rdma_getaddrinfo does the same; libfabric's verbs provider resolves this way).
    if (node == nullptr && service == nullptr) return FromHints(*hints, res);
    addrinfo ai_hints{};
    ai_hints.ai_family = hints != nullptr ? hints->ai_family : AF_UNSPEC;
    ai_hints.ai_socktype = SOCK_STREAM;
    if (flags & RAI_PASSIVE) ai_hints.ai_flags |= AI_PASSIVE;
    if (flags & RAI_NUMERICHOST) ai_hints.ai_flags |= AI_NUMERICHOST;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(node, service, &ai_hints, &found); rc != 0)
      return ReturnMinusOne("rdma_getaddrinfo", {},
                            Status(ErrnoOf(rc), std::string("getaddrinfo: ") + gai_strerror(rc)));
    int ps = hints != nullptr && hints->ai_port_space != 0 ? hints->ai_port_space : RDMA_PS_TCP;
    int qp_type = hints != nullptr && hints->ai_qp_type != 0
                      ? hints->ai_qp_type
                      : (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
    rdma_addrinfo* head = nullptr;
    rdma_addrinfo** tail = &head;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      if (!softverbs::cm::IsIpFamily(a->ai_addr)) continue;
      auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
      if (r == nullptr) break;
      r->ai_flags = flags;
      r->ai_family = a->ai_family;
      r->ai_qp_type = qp_type;
      r->ai_port_space = ps;
      if (flags & RAI_PASSIVE) {
        r->ai_src_addr = CopyAddress(a->ai_addr, &r->ai_src_len);
      } else {
        r->ai_dst_addr = CopyAddress(a->ai_addr, &r->ai_dst_len);
        if (hints != nullptr && hints->ai_src_addr != nullptr && softverbs::cm::IsIpFamily(hints->ai_src_addr)) {
          r->ai_src_addr = CopyAddress(hints->ai_src_addr, &r->ai_src_len);
        } else if (!(flags & RAI_NOROUTE)) {
          // The source this host would use to reach the destination (the destination itself
          // for one of its own addresses, loopback for a wildcard, the route's for another host).
          sockaddr_storage src = softverbs::cm::AnySourceFor(a->ai_addr);
          r->ai_src_addr = CopyAddress(reinterpret_cast<sockaddr*>(&src), &r->ai_src_len);
        }
      }
      *tail = r;
      tail = &r->ai_next;
    }
    freeaddrinfo(found);
    if (head == nullptr)
      return ReturnMinusOne("rdma_getaddrinfo", {}, Status(ENOENT, "no IPv4/IPv6 address found"));
    Remember(head);
    *res = head;
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// support: rdma_freeaddrinfo | implemented | frees the list with free(3), as rdma-core does: also a list (or the tail of one) the caller built with malloc, which libfabric's verbs provider hands over; NULL is a no-op
SV_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo* res) {
  if (res == nullptr) return;
  {
    std::lock_guard l(g_lists_mutex);
    g_lists.erase(res);
  }
  FreeList(res);
}

// support: rdma_get_devices | implemented | [softverbs0's context, NULL]; the context stays open while the library is loaded
SV_EXPORT struct ibv_context** rdma_get_devices(int* num_devices) {
  if (num_devices != nullptr) *num_devices = 0;
  Result<ibv_context*> context = rdmacm::DeviceContext();
  if (!context.ok()) {
    // No device: an empty, NULL-terminated list, as ibv_get_device_list gives.
    auto** empty = static_cast<ibv_context**>(calloc(1, sizeof(ibv_context*)));
    if (empty == nullptr) return ReturnNull<ibv_context*>("rdma_get_devices", {}, softverbs::NoMemory("list"));
    std::lock_guard l(g_lists_mutex);
    g_lists.insert(empty);
    return empty;
  }
  auto** list = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (list == nullptr) return ReturnNull<ibv_context*>("rdma_get_devices", {}, softverbs::NoMemory("list"));
  list[0] = context.value();
  if (num_devices != nullptr) *num_devices = 1;
  std::lock_guard l(g_lists_mutex);
  g_lists.insert(list);
  return list;
}

// support: rdma_free_devices | implemented | frees the array (the contexts stay open); NULL is a no-op
SV_EXPORT void rdma_free_devices(struct ibv_context** list) {
  if (list == nullptr) return;
  {
    std::lock_guard l(g_lists_mutex);
    if (g_lists.erase(list) == 0) {
      LogRefusal("rdma_free_devices", {}, Invalid("the list was not returned by rdma_get_devices"));
      return;
    }
  }
  free(list);
}

// --- endpoints ----------------------------------------------------------------------------------

// support: rdma_create_ep | implemented | synchronous id bound (passive) or with address and route resolved (active), plus a QP when qp_init_attr is given
SV_EXPORT int rdma_create_ep(struct rdma_cm_id** id, struct rdma_addrinfo* res, struct ibv_pd* pd,
                             struct ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr)
    return ReturnMinusOne("rdma_create_ep", {}, Invalid("id or res is NULL"));
  rdma_cm_id* made = nullptr;
  if (rdma_create_id(nullptr, &made, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0)
    return -1;
  auto fail = [&]() {
    int e = errno;
    rdma_destroy_id(made);
    errno = e;
    return -1;
  };
  if (res->ai_flags & RAI_PASSIVE) {
    if (res->ai_src_addr == nullptr)
      return ReturnMinusOne("rdma_create_ep", {}, Invalid("a passive rdma_addrinfo without ai_src_addr")), fail();
    if (rdma_bind_addr(made, res->ai_src_addr) != 0) return fail();
    if (qp_init_attr != nullptr) {
      // rdma_create_ep(3) on the passive side: the QP comes with each rdma_get_request id.
      rdmacm::CmId* ours = rdmacm::Lookup(made);
      ours->ep_qp = true;
      ours->ep_qp_attr = *qp_init_attr;
      // The QP type is the address's (rdma_getaddrinfo's ai_qp_type), as rdma-core does.
      ours->ep_qp_attr.qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      ours->ep_pd = pd;
    }
    *id = made;
    return 0;
  }
  if (rdma_resolve_addr(made, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return fail();
  if (rdma_resolve_route(made, 2000) != 0) return fail();
  if (qp_init_attr != nullptr) {
    qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (rdma_create_qp(made, pd, qp_init_attr) != 0) return fail();
  }
  *id = made;
  return 0;
}

// support: rdma_destroy_ep | implemented | destroys the id's QP (and the CQs the CM made), then the id
SV_EXPORT void rdma_destroy_ep(struct rdma_cm_id* id) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr) {
    LogRefusal("rdma_destroy_ep", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    return;
  }
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

// support: rdma_get_request | implemented | next CONNECT_REQUEST of a listening id; the new id is synchronous and gets the rdma_create_ep QP
SV_EXPORT int rdma_get_request(struct rdma_cm_id* listen, struct rdma_cm_id** id) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(listen);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_get_request", {}, Invalid("listen is NULL or not an rdma_cm_id of softverbs"));
    if (id == nullptr) return ReturnMinusOne("rdma_get_request", rdmacm::IdName(listen), Invalid("id is NULL"));
    for (;;) {
      Result<rdma_cm_event*> got = rdmacm::NextEvent(ours->channel);
      if (!got.ok()) {
        if (got.status().code() == EAGAIN) {
          errno = EAGAIN;
          return -1;
        }
        return ReturnMinusOne("rdma_get_request", rdmacm::IdName(listen), got.status());
      }
      rdma_cm_event* event = got.value();
      if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        // Another id's event on a shared channel: not ours to consume here.
        SV_LOG(kDebug, "rdma_get_request: skipping %s", rdma_event_str(event->event));
        (void)rdmacm::AckEvent(event);
        continue;
      }
      rdmacm::CmId* child = rdmacm::Lookup(event->id);
      child->sync_event = event;
      event->id->event = event;
      if (rdma_migrate_id(event->id, nullptr) != 0) return -1;
      if (ours->ep_qp) {
        ibv_qp_init_attr attr = ours->ep_qp_attr;
        if (rdma_create_qp(event->id, ours->ep_pd, &attr) != 0) {
          int e = errno;
          rdma_reject(event->id, nullptr, 0);
          rdmacm::DestroyId(child);
          errno = e;
          return -1;
        }
      }
      *id = event->id;
      return 0;
    }
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// --- SRQ on an identifier (rdma_create_srq(3)) -------------------------------------------------

namespace {

// rdma_create_srq(3): "If a protection domain is not given - pd parameter is NULL - then the
// rdma_cm_id will be created using a default protection domain" (as rdma_create_qp).
softverbs::Status CreateSrq(rdmacm::CmId* id, ibv_srq_init_attr_ex* attr) {
  rdma_cm_id& p = id->pub;
  if (p.verbs == nullptr)
    return Invalid("the identifier is not bound to a device: rdma_bind_addr or rdma_resolve_addr first");
  if (p.srq != nullptr) return Invalid("the identifier already has an SRQ");
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
    return softverbs::NotSupported("only basic SRQs (XRC and tag matching SRQs are not offered)");
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    Result<ibv_pd*> pd = rdmacm::DefaultPd();
    if (!pd.ok()) return pd.status();
    attr->pd = pd.value();
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  if (attr->pd->context != p.verbs) return Invalid("the PD is not of the identifier's device");
  ibv_srq* srq = ibv_create_srq_ex(p.verbs, attr);
  if (srq == nullptr) return Status(errno, std::string("ibv_create_srq_ex: ") + strerror(errno));
  p.srq = srq;
  return Status::Ok();
}

}  // namespace

// support: rdma_create_srq | implemented | basic SRQ on the id (default PD when NULL), used by rdma_create_qp when its attr has none
SV_EXPORT int rdma_create_srq(struct rdma_cm_id* id, struct ibv_pd* pd, struct ibv_srq_init_attr* attr) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr) return ReturnMinusOne("rdma_create_srq", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
  if (attr == nullptr) return ReturnMinusOne("rdma_create_srq", rdmacm::IdName(id), Invalid("attr is NULL"));
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  ex.srq_type = IBV_SRQT_BASIC;
  ex.pd = pd;
  Status s = CreateSrq(ours, &ex);
  if (!s.ok()) return ReturnMinusOne("rdma_create_srq", rdmacm::IdName(id), s);
  attr->attr = ex.attr;  // the actual sizes, as ibv_create_srq(3) writes them back
  return 0;
}

// No man page of its own; same convention as rdma_create_srq(3).
// support: rdma_create_srq_ex | implemented | basic SRQs only (XRC / tag matching → EOPNOTSUPP)
SV_EXPORT int rdma_create_srq_ex(struct rdma_cm_id* id, struct ibv_srq_init_attr_ex* attr) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr) return ReturnMinusOne("rdma_create_srq_ex", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
  if (attr == nullptr) return ReturnMinusOne("rdma_create_srq_ex", rdmacm::IdName(id), Invalid("attr is NULL"));
  Status s = CreateSrq(ours, attr);
  if (!s.ok()) return ReturnMinusOne("rdma_create_srq_ex", rdmacm::IdName(id), s);
  return 0;
}

// support: rdma_destroy_srq | implemented | destroys the id's SRQ
SV_EXPORT void rdma_destroy_srq(struct rdma_cm_id* id) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr || id->srq == nullptr) {
    LogRefusal("rdma_destroy_srq", {}, Invalid("id is NULL, not softverbs', or has no SRQ"));
    return;
  }
  if (ibv_destroy_srq(id->srq) == 0) id->srq = nullptr;
}
