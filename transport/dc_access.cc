#include "transport/dc_access.h"

namespace softverbs::transport {

bool DcAdmits(const QpEndpoint& target, bool from_dci, const DcDestination& dest) {
  if (!from_dci && !target.dct) return true;  // RC/UC/UD to a non-DC QP: not DC's business
  if (from_dci != (target.dct != 0)) return false;  // a DCI meets DCTs only, and only DCIs reach a DCT
  return target.dc_access_key == dest.access_key;
}

}  // namespace softverbs::transport
