// Device discovery and queries: ibv_get_device_list, ibv_open_device, ibv_query_device/_ex,
// ibv_query_port, the GID and P_Key tables, async events.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/device_attrs.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"
#include "base/strings.h"

// verbs.h wraps these in macros; the exported functions carry the plain names.
#undef ibv_query_port

namespace softverbs::abi {
namespace {

SvDevice* TheDevice() {
  static SvDevice* dev = [] {
    auto* d = new SvDevice{};
    d->device.node_type = IBV_NODE_CA;
    d->device.transport_type = IBV_TRANSPORT_IB;  // RoCE is the IB transport over Ethernet
    snprintf(d->device.name, sizeof(d->device.name), "%s", core::Identity().name.c_str());
    // There is no kernel device behind softverbs0: these are the names rdma-core would give its
    // uverbs node (dev_name "uverbs0", dev_path its sysfs directory). They exist for programs run
    // through `softverbs run`, whose device view renders them (tools/cli/sysfs_view.cc); UCX
    // checks /dev/infiniband/<dev_name> before it uses a device.
    snprintf(d->device.dev_name, sizeof(d->device.dev_name), "uverbs0");
    snprintf(d->device.dev_path, sizeof(d->device.dev_path), "/sys/class/infiniband_verbs/uverbs0");
    snprintf(d->device.ibdev_path, sizeof(d->device.ibdev_path), "/sys/class/infiniband/%.64s",
             d->device.name);
    return d;
  }();
  return dev;
}

bool IsOurDevice(ibv_device* device) { return device == &TheDevice()->device; }

const char* kPortRule = "port_num must be 1 (softverbs0 has one port)";

}  // namespace

// One place that finds the context and checks the port number of the query verbs below.
static Status CheckPort(uint8_t port_num) {
  return port_num == 1 ? Status::Ok() : Invalid(kPortRule);
}

}  // namespace softverbs::abi

using namespace softverbs;
using namespace softverbs::abi;

SV_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  // Never NULL on success: one device per host (DESIGN.md section 3).
  auto** list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = &TheDevice()->device;
  if (num_devices != nullptr) *num_devices = 1;
  return list;
}
SV_DEFAULT_VERSION(ibv_get_device_list);

SV_EXPORT void ibv_free_device_list(ibv_device** list) { free(list); }
SV_DEFAULT_VERSION(ibv_free_device_list);

SV_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}
SV_DEFAULT_VERSION(ibv_get_device_name);

SV_EXPORT int ibv_get_device_index(ibv_device* device) { return IsOurDevice(device) ? 0 : -1; }

SV_EXPORT __be64 ibv_get_device_guid(ibv_device*) {
  __be64 guid;
  memcpy(&guid, core::Identity().node_guid.data(), sizeof(guid));
  return guid;
}
SV_DEFAULT_VERSION(ibv_get_device_guid);

// A context on `core` (a new object space or an imported one): the ibv_context applications hold.
static ibv_context* NewContext(const char* verb, ibv_device* device, std::unique_ptr<core::Context> core) {
  auto* ctx = new (std::nothrow) SvContext{};
  if (ctx == nullptr) return ReturnNull<ibv_context>(verb, device->name, NoMemory("out of memory"));
  ctx->core = std::move(core);
  // The command fd names the context's object space (core/object_space.h): a dup of it, given to
  // ibv_import_device here or in another process, opens a context sharing its PDs and MRs.
  ctx->cmd_fd = ctx->core->object_space().fd();
  ibv_context& c = ctx->vctx.context;
  c.device = device;
  c.cmd_fd = ctx->cmd_fd;
  c.async_fd = ctx->core->async_fd();
  c.num_comp_vectors = 1;
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&c.mutex, nullptr);
  ctx->vctx.sz = sizeof(ctx->vctx);
  InitContextOps(ctx);
  SV_LOG(kInfo, "%s(%s): context %p, cmd_fd %d", verb, device->name, static_cast<void*>(&c), c.cmd_fd);
  return &c;
}

SV_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  if (!IsOurDevice(device)) return ReturnNull<ibv_context>("ibv_open_device", "", Invalid("not a softverbs device"));
  auto core = core::Context::Open();
  if (!core.ok()) return ReturnNull<ibv_context>("ibv_open_device", device->name, core.status());
  return NewContext("ibv_open_device", device, std::move(core.value()));
}
SV_DEFAULT_VERSION(ibv_open_device);

// ibv_import_device(3): a context sharing the object space of the context whose (dup'ed) cmd_fd
// this is; the context owns the fd from now on (ibv_close_device closes it).
SV_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  const std::string fd_name = "fd " + std::to_string(cmd_fd);
  auto space = core::ObjectSpace::Open(cmd_fd);
  if (!space.ok()) return ReturnNull<ibv_context>("ibv_import_device", fd_name, space.status());
  auto core = core::Context::Open(std::move(space.value()));
  if (!core.ok()) return ReturnNull<ibv_context>("ibv_import_device", fd_name, core.status());
  return NewContext("ibv_import_device", &TheDevice()->device, std::move(core.value()));
}

SV_EXPORT int ibv_close_device(ibv_context* context) {
  SvContext* ctx = ToSv(context);
  pthread_mutex_destroy(&context->mutex);
  delete ctx;  // the core context closes the cmd_fd with its object space
  return 0;
}
SV_DEFAULT_VERSION(ibv_close_device);

SV_EXPORT int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  *attr = DeviceAttr();
  return 0;
}
SV_DEFAULT_VERSION(ibv_query_device);

// The extended query (verbs_context::query_device_ex): fills at most attr_size bytes, so programs
// built against older headers keep working.
int softverbs::abi::QueryDeviceEx(ibv_context*, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                  size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0)
    return ReturnErrno("ibv_query_device_ex", "", Invalid("input->comp_mask must be 0"));
  if (attr_size < sizeof(ibv_device_attr))
    return ReturnErrno("ibv_query_device_ex", "", Invalid("attr_size is smaller than ibv_device_attr"));
  // A caller built against newer headers passes a larger struct: what we do not know reads 0.
  memset(attr, 0, attr_size);
  ibv_device_attr_ex ex = DeviceAttrEx();
  memcpy(attr, &ex, std::min(attr_size, sizeof(ex)));
  return 0;
}

int softverbs::abi::QueryPort(ibv_context*, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  if (Status s = CheckPort(port_num); !s.ok()) return ReturnErrno("ibv_query_port", "", s);
  ibv_port_attr p = PortAttr();
  memset(attr, 0, attr_len);
  memcpy(attr, &p, std::min(attr_len, sizeof(p)));
  return 0;
}

// The exported ibv_query_port takes the layout from before port_cap_flags2 was appended
// (_compat_ibv_port_attr); verbs.h's inline wrapper calls the context op instead.
SV_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, struct _compat_ibv_port_attr* attr) {
  return QueryPort(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                   offsetof(ibv_port_attr, port_cap_flags2));
}
SV_DEFAULT_VERSION(ibv_query_port);

SV_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  // ibv_query_gid(3): 0 on success, -1 on error. An empty slot reads as a zero GID.
  if (Status s = CheckPort(port_num); !s.ok()) return ReturnMinusOne("ibv_query_gid", "", s);
  if (index < 0 || index >= static_cast<int>(core::DeviceLimits::kGidTableLen))
    return ReturnMinusOne("ibv_query_gid", "", Invalid("index " + std::to_string(index) + " is outside the GID table"));
  core::GidTable t = ToSv(context)->core->gids();
  memcpy(gid->raw, t.at(index).gid.data(), 16);
  return 0;
}
SV_DEFAULT_VERSION(ibv_query_gid);

static void FillGidEntry(const core::GidEntry& e, uint32_t index, ibv_gid_entry* out) {
  memcpy(out->gid.raw, e.gid.data(), 16);
  out->gid_index = index;
  out->port_num = 1;
  out->gid_type = static_cast<uint32_t>(e.type);
  out->ndev_ifindex = e.ifindex;
}

SV_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  const char* verb = "ibv_query_gid_ex";
  if (flags != 0) return ReturnErrno(verb, "", Invalid("flags must be 0"));
  if (entry_size < sizeof(ibv_gid_entry)) return ReturnErrno(verb, "", Invalid("entry_size is too small"));
  if (port_num != 1) return ReturnErrno(verb, "", Invalid(kPortRule));
  if (gid_index >= core::DeviceLimits::kGidTableLen)
    return ReturnErrno(verb, "", Invalid("gid_index " + std::to_string(gid_index) + " is outside the GID table"));
  core::GidTable t = ToSv(context)->core->gids();
  // Like rdma-core on hardware: an empty entry is ENODATA.
  if (!t.at(gid_index).valid) return ENODATA;
  FillGidEntry(t.at(gid_index), gid_index, entry);
  return 0;
}

SV_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                       uint32_t flags, size_t entry_size) {
  const char* verb = "ibv_query_gid_table";
  if (flags != 0) return ReturnNegErrno(verb, "", Invalid("flags must be 0"));
  if (entry_size < sizeof(ibv_gid_entry)) return ReturnNegErrno(verb, "", Invalid("entry_size is too small"));
  core::GidTable t = ToSv(context)->core->gids();
  size_t n = 0;
  for (uint32_t i = 0; i < core::DeviceLimits::kGidTableLen; ++i) {
    if (!t.at(i).valid) continue;
    if (n == max_entries) return ReturnNegErrno(verb, "", Invalid("max_entries is smaller than the valid GIDs"));
    FillGidEntry(t.at(i), i, reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + n * entry_size));
    ++n;
  }
  return static_cast<ssize_t>(n);
}

// IBVERBS_PRIVATE_34 (driver.h, not installed): the sysfs GID type, 0 = IB/RoCE v1, 1 = RoCE v2.
SV_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                 uint32_t* type) {
  if (Status s = CheckPort(port_num); !s.ok()) return ReturnMinusOne("ibv_query_gid_type", "", s);
  if (index >= core::DeviceLimits::kGidTableLen)
    return ReturnMinusOne("ibv_query_gid_type", "", Invalid("index is outside the GID table"));
  core::GidTable t = ToSv(context)->core->gids();
  *type = t.at(index).valid && t.at(index).type == core::GidType::kRoceV2 ? 1 : 0;
  return 0;
}

SV_EXPORT int ibv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (Status s = CheckPort(port_num); !s.ok()) return ReturnMinusOne("ibv_query_pkey", "", s);
  if (index < 0 || index >= core::DeviceLimits::kPkeyTableLen)
    return ReturnMinusOne("ibv_query_pkey", "", Invalid("index " + std::to_string(index) + " is outside the P_Key table (1 entry)"));
  *pkey = htobe16(core::DeviceLimits::kDefaultPkey);
  return 0;
}
SV_DEFAULT_VERSION(ibv_query_pkey);

SV_EXPORT int ibv_get_pkey_index(ibv_context*, uint8_t port_num, __be16 pkey) {
  // ibv_get_pkey_index(3): the index, or -1 with errno if the P_Key is not in the table. The
  // table is compared exactly, as rdma-core does.
  if (port_num != 1) return ReturnMinusOne("ibv_get_pkey_index", "", Invalid(kPortRule));
  if (be16toh(pkey) == core::DeviceLimits::kDefaultPkey) return 0;
  return ReturnMinusOne("ibv_get_pkey_index", "", Invalid("P_Key " + Hex(be16toh(pkey)) + " is not in the table"));
}

SV_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  auto e = ToSv(context)->core->GetAsyncEvent();
  if (!e.ok()) {
    // A non-blocking fd with nothing pending is not a refusal worth a log line.
    errno = e.status().code();
    return -1;
  }
  event->event_type = static_cast<ibv_event_type>(e->type);
  switch (e->subject) {
    case core::AsyncEvent::Subject::kQp: event->element.qp = static_cast<ibv_qp*>(e->handle); break;
    case core::AsyncEvent::Subject::kCq: event->element.cq = static_cast<ibv_cq*>(e->handle); break;
    case core::AsyncEvent::Subject::kSrq: event->element.srq = static_cast<ibv_srq*>(e->handle); break;
    case core::AsyncEvent::Subject::kPort: event->element.port_num = static_cast<int>(e->port); break;
    case core::AsyncEvent::Subject::kDevice: event->element.port_num = 0; break;
  }
  return 0;
}
SV_DEFAULT_VERSION(ibv_get_async_event);

SV_EXPORT void ibv_ack_async_event(ibv_async_event*) {
  // Nothing to count: instead of making destruction wait for acknowledgements as rdma-core does,
  // destroying an object drops its pending events (Context::DropAsyncEventsFor), so an event
  // never names a freed object.
}
SV_DEFAULT_VERSION(ibv_ack_async_event);
