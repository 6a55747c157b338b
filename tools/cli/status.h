// `softverbs status`: what the host holds, gathered once (CollectStatus) and printed readably
// (PrintStatusText) or as one JSON document (StatusJson; schema in docs/device.md, "softverbs
// status"). Read-only: the CLI does not join the host, it reads the registry and maps each live
// process's QP endpoints as a peer would (fabric/host/host_directory.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace softverbs::fabric {
class HostRegistry;
}

namespace softverbs::cli {

using Counters = std::vector<std::pair<std::string, uint64_t>>;  // in the order reported

// One process's answer on its channel (transport/wire/wire_fabric.cc, Report), parsed.
struct QpWireCounters {
  uint32_t qpn = 0;
  std::string side;  // "requester" or "responder"
  Counters counters;
};
struct ProcessWire {
  pid_t pid = 0;
  std::vector<std::string> ports;  // its UDP 4791 sockets, "address:port"
  Counters device;                 // sent, received, icrc_errors, ...
  Counters qp1;                    // MADs on QP1: received, refused, unhandled, sent
  // The CM agent's MADs by type (cm/agent.h): "received", "sent", "resent", "dropped", each
  // {REQ, MRA, ...}; empty when the process has no CM agent (it never used librdmacm).
  std::vector<std::pair<std::string, Counters>> cm;
  std::vector<QpWireCounters> qps;
  std::string text;                // the answer as received (the readable format prints it)
};
// Parses a Report() answer; lines it does not know are skipped (a newer process may say more).
ProcessWire ParseWireReport(const std::string& text);

struct QpStatus {
  uint32_t qpn = 0;
  pid_t pid = 0;
  bool readable = false;  // its endpoint could be mapped (else only qpn and pid are known)
  std::string type;       // "RC", "UC", "UD", "RAW_PACKET", "XRC_SEND", "XRC_RECV", "DCT", ...
  std::string state;      // "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"
  uint32_t dest_qpn = 0;  // RC/UC/XRC: the connected peer's number (0: none yet)
  pid_t peer_pid = 0;     // the peer's process, when it is on this host and connected back
  std::vector<const QpWireCounters*> wire;  // into HostStatus::wire
};

struct TableUse {
  std::string name;  // "processes", "QPs", "memory keys", "SRQs", "XRC domains"
  std::string key;   // its JSON name: "processes", "qps", "memory_keys", "srqs", "xrc_domains"
  std::map<pid_t, int> by_pid;
};

struct HostStatus {
  std::string registry;         // the region's /dev/shm name
  long long allocated_kib = -1; // -1: unknown
  long long capacity_kib = -1;
  uint32_t reclaimed = 0;       // entries of dead processes reclaimed by this call
  std::vector<TableUse> tables;
  std::vector<QpStatus> qps;    // by QP number
  std::vector<ProcessWire> wire;
  std::string wire_error;       // why the processes could not be asked (empty: they were)
};

// Reclaims the entries of dead processes, then reads what the live ones hold.
HostStatus CollectStatus(fabric::HostRegistry& registry);
void PrintStatusText(const HostStatus& status);

// The device as `softverbs devices` shows it, for the JSON document.
std::string DeviceJson(const std::string& libdir);
std::string StatusJson(const HostStatus& status, const std::string& device_json);
// `s` as a JSON string literal: quotes, backslashes and control characters escaped; a byte that
// is not part of valid UTF-8 becomes U+FFFD.
std::string JsonString(const std::string& s);

}  // namespace softverbs::cli
