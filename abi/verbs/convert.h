// Conversions between rdma-core structs and the core's types. The enum values are identical by
// construction (type_checks.cc proves it at compile time), so conversions are field copies.
#pragma once

#include <infiniband/verbs.h>

#include "core/cq.h"
#include "core/types.h"

namespace softverbs::abi {

core::AddressVector ToCore(const ibv_ah_attr& a);
ibv_ah_attr ToIbv(const core::AddressVector& av);

core::QpAttributes ToCore(const ibv_qp_attr& a);
ibv_qp_attr ToIbv(const core::QpAttributes& a);

core::QpCaps ToCore(const ibv_qp_cap& c);
ibv_qp_cap ToIbv(const core::QpCaps& c);

void ToIbv(const core::Completion& c, ibv_wc* wc);

}  // namespace softverbs::abi
