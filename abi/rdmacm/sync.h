// Events and identifiers as the verbs of several files share them, and the synchronous mode
// (rdma_create_id(3) with a NULL channel): each verb waits for its own event.
#pragma once

#include <rdma/rdma_cma.h>

#include "abi/rdmacm/objects.h"
#include "base/status.h"

namespace softverbs::abi::rdmacm {

Result<rdma_cm_event*> NextEvent(CmChannel* channel);
Status AckEvent(rdma_cm_event* event);
void DestroyId(CmId* id);

// For a synchronous identifier: reads the event its verb caused and turns a failure into the
// errno rdma-core's synchronous mode gives (REJECTED → ECONNREFUSED, otherwise -status).
// Asynchronous identifiers: nothing to do.
Status CompleteSync(CmId* id);

}  // namespace softverbs::abi::rdmacm
