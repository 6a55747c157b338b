// Merges classic pcap files (the per-process captures of SOFTVERBS_PCAP) into one, records in
// time order, for `softverbs trace -w FILE`. Each input's own order is kept (records of equal
// time stay as their file wrote them: a request before its answer).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace softverbs::cli {

// Writes `output` from `inputs` (little-endian microsecond pcap files of one link type, as
// fabric/packet/pcap.h writes them). No input, or inputs all empty: a file with the header only,
// of LINKTYPE_RAW. Refuses a file of another format or link type, naming it.
Status MergePcaps(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace softverbs::cli
