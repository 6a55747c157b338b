// Flow counters: ibv_create_counters(3), ibv_attach_counters_point_flow(3), ibv_read_counters(3),
// ibv_destroy_counters(3). The object and its rules are core/counters.h; a flow binds it through
// IBV_FLOW_SPEC_ACTION_COUNT (flow.cc). Each verb returns an errno (NULL and errno for create).
#include <atomic>
#include <memory>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/common/raw_enum.h"
#include "abi/verbs/ops.h"
#include "core/counters.h"

namespace softverbs::abi {
namespace {

struct SvCounters {
  ibv_counters counters;
  uint32_t number = 0;  // for log lines
  std::unique_ptr<core::FlowCounters> core;
};

SvCounters* ToSvCounters(ibv_counters* c) { return reinterpret_cast<SvCounters*>(c); }

std::string CountersName(ibv_counters* c) { return ObjectName("counters", ToSvCounters(c)->number); }

}  // namespace

ibv_counters* CreateCounters(ibv_context* context, ibv_counters_init_attr* attr) {
  static std::atomic<uint32_t> next_number{1};
  // mlx5_create_counters: a comp_mask bit it does not know is EOPNOTSUPP.
  if (attr != nullptr && attr->comp_mask != 0)
    return ReturnNull<ibv_counters>("ibv_create_counters", context->device->name,
                                    NotSupported("comp_mask " + std::to_string(attr->comp_mask) + " names no field"));
  auto* c = new (std::nothrow) SvCounters{};
  if (c == nullptr) return ReturnNull<ibv_counters>("ibv_create_counters", context->device->name, NoMemory("out of memory"));
  c->core = std::make_unique<core::FlowCounters>();
  c->counters.context = context;
  c->number = next_number.fetch_add(1, std::memory_order_relaxed);
  return &c->counters;
}

int DestroyCounters(ibv_counters* counters) {
  // The kernel counts a flow as a user of its counters (ib_destroy_usecnt): EBUSY while bound.
  if (ToSvCounters(counters)->core->bound())
    return ReturnErrno("ibv_destroy_counters", CountersName(counters),
                       Busy("a flow counts with them: destroy the flow first"));
  delete ToSvCounters(counters);
  return 0;
}

int AttachCountersPointFlow(ibv_counters* counters, ibv_counter_attach_attr* attr, ibv_flow* flow) {
  const char* verb = "ibv_attach_counters_point_flow";
  // mlx5 offers the static binding only: descriptions first, then ibv_create_flow with
  // IBV_FLOW_SPEC_ACTION_COUNT (mlx5_attach_counters_point_flow: a flow is ENOTSUP).
  if (flow != nullptr)
    return ReturnErrno(verb, CountersName(counters),
                       NotSupported("attaching to an existing flow: attach with flow NULL, then name the counters "
                                    "in ibv_create_flow (IBV_FLOW_SPEC_ACTION_COUNT), as mlx5"));
  if (attr == nullptr) return ReturnErrno(verb, CountersName(counters), Invalid("attr is NULL"));
  if (attr->comp_mask != 0)
    return ReturnErrno(verb, CountersName(counters),
                       NotSupported("comp_mask " + std::to_string(attr->comp_mask) + " names no field"));
  Status s = ToSvCounters(counters)->core->Describe(RawEnum(attr->counter_desc), attr->index);
  return s.ok() ? 0 : ReturnErrno(verb, CountersName(counters), s);
}

int ReadCounters(ibv_counters* counters, uint64_t* values, uint32_t ncounters, uint32_t flags) {
  if (values == nullptr && ncounters != 0)
    return ReturnErrno("ibv_read_counters", CountersName(counters), Invalid("counters_value is NULL"));
  Status s = ToSvCounters(counters)->core->Read({values, ncounters}, flags);
  return s.ok() ? 0 : ReturnErrno("ibv_read_counters", CountersName(counters), s);
}

core::FlowCounters* CoreOf(ibv_counters* counters) {
  return counters ? ToSvCounters(counters)->core.get() : nullptr;
}

}  // namespace softverbs::abi
