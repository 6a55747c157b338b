// What ibv_query_device(_ex) and ibv_query_port report for softverbs0, built from
// core::DeviceLimits and core::Identity() (documented in docs/device.md).
#pragma once

#include <infiniband/verbs.h>

namespace softverbs::abi {

ibv_device_attr DeviceAttr();
ibv_device_attr_ex DeviceAttrEx();
ibv_port_attr PortAttr();

}  // namespace softverbs::abi
