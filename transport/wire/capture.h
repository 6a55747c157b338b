// SOFTVERBS_PCAP=<file>: this process's one capture file, shared by both fabrics. The wire
// records the datagrams it sends and receives (wire_fabric.cc); the same host's messages, which
// never become packets, are rendered as the RoCEv2 packets the wire would carry for them
// (capture_link.h). "%p" in the name is replaced by the process id: several processes, several
// files (`softverbs trace` merges them).
#pragma once

#include "fabric/packet/pcap.h"

namespace softverbs::transport {

// The capture file of this process incarnation (a child of fork() opens its own), opened on the
// first call; nullptr when SOFTVERBS_PCAP is unset or the file cannot be created (explained once).
// It lives as long as the process: every record is flushed as it is written.
fabric::packet::PcapWriter* ProcessCapture();

}  // namespace softverbs::transport
