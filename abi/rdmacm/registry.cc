// The live librdmacm objects and softverbs0's context, as the CM verbs see them.
#include <infiniband/verbs.h>

#include <endian.h>

#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "abi/rdmacm/objects.h"
#include "cm/address.h"

namespace softverbs::abi::rdmacm {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
template <typename T>
std::unordered_set<T*>& Set() {
  static std::unordered_set<T*> s;
  return s;
}

struct Device {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_device_attr attr{};
  Status status;
};

Device& OpenDevice() {
  // Opened once and never closed: the contexts "remain opened while the librdmacm is loaded".
  static Device* device = [] {
    auto* d = new Device();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) {
      d->status = Status(ENODEV, "no RDMA device (softverbs0) is present");
    } else {
      d->context = ibv_open_device(list[0]);
      if (d->context == nullptr) d->status = Status(errno, "cannot open softverbs0");
      else if (ibv_query_device(d->context, &d->attr) != 0)
        d->status = Status(errno, "cannot query softverbs0");
    }
    if (list != nullptr) ibv_free_device_list(list);
    return d;
  }();
  return *device;
}

}  // namespace

void Register(CmId* id) { std::lock_guard l(RegistryMutex()); Set<CmId>().insert(id); }
void Unregister(CmId* id) { std::lock_guard l(RegistryMutex()); Set<CmId>().erase(id); }
CmId* Lookup(rdma_cm_id* id) {
  std::lock_guard l(RegistryMutex());
  auto* ours = reinterpret_cast<CmId*>(id);
  return Set<CmId>().count(ours) ? ours : nullptr;
}
void Register(CmChannel* c) { std::lock_guard l(RegistryMutex()); Set<CmChannel>().insert(c); }
void Unregister(CmChannel* c) { std::lock_guard l(RegistryMutex()); Set<CmChannel>().erase(c); }
CmChannel* Lookup(rdma_event_channel* channel) {
  std::lock_guard l(RegistryMutex());
  auto* ours = reinterpret_cast<CmChannel*>(channel);
  return Set<CmChannel>().count(ours) ? ours : nullptr;
}
void Register(CmEvent* e) { std::lock_guard l(RegistryMutex()); Set<CmEvent>().insert(e); }
bool Unregister(CmEvent* e) { std::lock_guard l(RegistryMutex()); return Set<CmEvent>().erase(e) == 1; }

Result<ibv_context*> DeviceContext() {
  Device& d = OpenDevice();
  if (!d.status.ok()) return d.status;
  return d.context;
}

Result<ibv_pd*> DefaultPd() {
  static std::mutex m;
  std::lock_guard l(m);
  Device& d = OpenDevice();
  if (!d.status.ok()) return d.status;
  if (d.pd == nullptr) d.pd = ibv_alloc_pd(d.context);
  if (d.pd == nullptr) return Status(errno, "cannot allocate the default PD");
  return d.pd;
}

Result<cm::DeviceView> DeviceView() {
  Device& d = OpenDevice();
  if (!d.status.ok()) return d.status;
  ibv_port_attr port{};
  if (ibv_query_port(d.context, 1, &port) != 0) return Status(errno, "cannot query port 1");
  cm::DeviceView view;
  view.port_num = 1;
  view.node_guid = be64toh(d.attr.node_guid);
  // Other hosts reach this process's identifiers through QP1 (docs/cm.md, "Across hosts").
  AttachMadAgent(d.context);
  view.active_mtu = static_cast<uint8_t>(port.active_mtu);
  // Read each time: the GID table follows the host's addresses.
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    ibv_gid gid{};
    cm::Gid g{};
    if (ibv_query_gid(d.context, 1, i, &gid) == 0) memcpy(g.data(), gid.raw, 16);
    view.gids.push_back(g);
  }
  return view;
}

uint8_t MaxResponderResources() {
  int v = OpenDevice().attr.max_qp_rd_atom;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}
uint8_t MaxInitiatorDepth() {
  int v = OpenDevice().attr.max_qp_init_rd_atom;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

void SyncPublicFields(CmId* id) {
  const cm::Id& core = *id->core;
  rdma_route& route = id->pub.route;
  memcpy(&route.addr.src_storage, &core.src(), sizeof(sockaddr_storage));
  memcpy(&route.addr.dst_storage, &core.dst(), sizeof(sockaddr_storage));
  if (core.has_device() && id->pub.verbs == nullptr) {
    Result<ibv_context*> context = DeviceContext();
    if (context.ok()) id->pub.verbs = context.value();
    id->pub.port_num = core.device().port_num;
    // rdma-core gives a bound identifier the device's PD with its context (cma.c,
    // ucma_get_device: id.pd = cma_dev->pd, allocated on first use); UCX's rdmacm connection
    // manager creates its placeholder QP on id->pd (uct_rdmacm_cm_ep.c).
    Result<ibv_pd*> pd = DefaultPd();
    if (pd.ok()) id->pub.pd = pd.value();
  }
  if (core.has_device()) {
    // One path: this host's own port, as a RoCE path record describes it.
    ibv_sa_path_rec& p = id->path;
    p = {};
    cm::Gid sgid = cm::GidOf(reinterpret_cast<const sockaddr*>(&core.src()));
    memcpy(p.sgid.raw, sgid.data(), 16);
    if (core.dst().ss_family != 0) {
      cm::Gid dgid = cm::GidOf(reinterpret_cast<const sockaddr*>(&core.dst()));
      memcpy(p.dgid.raw, dgid.data(), 16);
    }
    p.pkey = htobe16(0xffff);
    p.hop_limit = 64;
    p.mtu = core.device().active_mtu;
    p.mtu_selector = 2;  // exactly
    p.packet_life_time = 14;
    p.reversible = 1;
    p.numb_path = 1;
    route.path_rec = &p;
    route.num_paths = core.state() >= cm::IdState::kRouteResolved ? 1 : 0;
    if (core.state() == cm::IdState::kListening) route.num_paths = 0;
  }
}

std::string IdName(const rdma_cm_id* id) {
  char text[40];
  snprintf(text, sizeof(text), "id %p", static_cast<const void*>(id));
  return text;
}

}  // namespace softverbs::abi::rdmacm
