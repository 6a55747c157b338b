#include "tools/cli/status.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "core/types.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/host_registry.h"
#include "fabric/host/peer_process.h"
#include "fabric/host/process_channel.h"
#include "fabric/host/process_token.h"
#include "transport/qp_endpoint.h"

namespace softverbs::cli {
namespace {

// The endpoint records enum ibv_qp_type / ibv_qp_state values (transport/qp_endpoint.h); their
// names are core's (core/types.h), as refusals print them.
std::string TypeName(uint32_t type, bool dct) {
  if (dct) return "DCT";  // mlx5dv_create_qp(3): a DC target; a DCI shows as the RC it sends as
  return core::QpTypeName(static_cast<core::QpType>(type));
}

std::string StateName(uint32_t state) {
  return state <= static_cast<uint32_t>(core::QpState::kErr) ? core::QpStateName(static_cast<core::QpState>(state))
                                                               : "state " + std::to_string(state);
}

// "name=value name=value ..." (a Report line after its leading words).
Counters ParseCounters(std::istringstream& words) {
  Counters out;
  std::string word;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    char* end = nullptr;
    const unsigned long long v = strtoull(word.c_str() + eq + 1, &end, 10);
    if (end == word.c_str() + eq + 1 || *end != '\0') continue;
    out.emplace_back(word.substr(0, eq), v);
  }
  return out;
}

// The live owners of each table's slots, counted by pid (one /proc read per process).
std::vector<TableUse> CountTables(fabric::HostRegistry& r, std::unordered_map<uint64_t, bool>& alive) {
  struct Row {
    const char* name;
    const char* key;
    fabric::SlotTable* table;
  } rows[] = {{"processes", "processes", &r.processes()}, {"QPs", "qps", &r.qps()},
              {"memory keys", "memory_keys", &r.keys()}, {"SRQs", "srqs", &r.srqs()},
              {"XRC domains", "xrc_domains", &r.xrcds()}};  // (open ibv_open_xrcd handles)
  std::vector<TableUse> out;
  for (const Row& row : rows) {
    TableUse use{row.name, row.key, {}};
    for (uint32_t i = 0; i < row.table->extent(); ++i) {
      const uint64_t owner = row.table->slot(i).owner.load(std::memory_order_acquire);
      if (owner == 0) continue;
      // One that died since the reclaim is left for the next one, not listed.
      auto [it, fresh] = alive.try_emplace(owner, false);
      if (fresh) it->second = fabric::ProcessToken(owner).IsAlive();
      if (it->second) use.by_pid[fabric::ProcessToken(owner).pid()]++;
    }
    out.push_back(std::move(use));
  }
  return out;
}

// Each live QP, read from its endpoint in its owner's arena (mapped as a peer maps it).
std::vector<QpStatus> ReadQps(fabric::HostRegistry& r, std::unordered_map<uint64_t, bool>& alive) {
  std::vector<QpStatus> out;
  std::unordered_map<uint32_t, std::unique_ptr<fabric::Peer>> peers;  // by process slot
  for (uint32_t i = 0; i < r.qps().extent(); ++i) {
    fabric::HostSlot& slot = r.qps().slot(i);
    const uint64_t owner = slot.owner.load(std::memory_order_acquire);
    auto& entry = fabric::EntryOf<fabric::QpEntry>(slot);
    const uint32_t qpn = entry.qp_num.load(std::memory_order_acquire);
    if (owner == 0 || qpn == 0) continue;
    auto [it, fresh] = alive.try_emplace(owner, false);
    if (fresh) it->second = fabric::ProcessToken(owner).IsAlive();
    if (!it->second) continue;
    QpStatus q;
    q.qpn = qpn;
    q.pid = fabric::ProcessToken(owner).pid();
    const uint32_t process_slot = entry.process_slot.load(std::memory_order_relaxed);
    auto& peer = peers[process_slot];
    if (!peer && process_slot < r.processes().extent()) {
      auto process = fabric::PeerProcess::Open(fabric::ProcessToken(owner));
      if (process.ok()) peer = std::make_unique<fabric::Peer>(process_slot, std::move(process.value()));
    }
    auto at = peer ? peer->At(entry.block, r) : Result<void*>(Status(ESRCH, "its process is gone"));
    if (at.ok()) {
      auto* e = static_cast<transport::QpEndpoint*>(at.value());
      if (std::atomic_ref<uint32_t>(e->qp_num).load(std::memory_order_acquire) == qpn) {
        q.readable = true;
        q.type = TypeName(e->type, e->dct != 0);
        q.state = StateName(e->state.load(std::memory_order_acquire));
        q.dest_qpn = e->dest_qp_num;
      }
    }
    out.push_back(std::move(q));
  }
  // A connected peer on this host: the QP our dest_qpn names, if it names us back.
  std::unordered_map<uint32_t, const QpStatus*> by_qpn;
  for (const QpStatus& q : out) by_qpn[q.qpn] = &q;
  for (QpStatus& q : out) {
    auto it = q.dest_qpn != 0 ? by_qpn.find(q.dest_qpn) : by_qpn.end();
    if (it != by_qpn.end() && it->second->dest_qpn == q.qpn) q.peer_pid = it->second->pid;
  }
  return out;
}

// Each live process that carries RoCEv2 answers on its channel with its wire counters
// (transport/wire/wire_fabric.h, Report; docs/wire.md). A process with no wire traffic has no
// receive thread yet and does not answer: it is not listed.
void AskWire(fabric::HostRegistry& r, HostStatus& s) {
  auto channel = fabric::ProcessChannel::OpenUnnamed();
  if (!channel.ok()) {
    s.wire_error = channel.status().rule();
    return;
  }
  const uint8_t question[] = {'r', 'e', 'p', 'o', 'r', 't'};
  for (uint32_t slot = 0; slot < r.processes().extent(); ++slot) {
    const uint64_t owner = r.processes().slot(slot).owner.load(std::memory_order_acquire);
    if (owner == 0 || !fabric::ProcessToken(owner).IsAlive()) continue;
    auto answer = (*channel)->Ask(r.name(), slot, question, 500);
    if (answer.ok()) s.wire.push_back(ParseWireReport(*answer));
  }
}

}  // namespace

ProcessWire ParseWireReport(const std::string& text) {
  ProcessWire w;
  w.text = text;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "pid") {
      words >> w.pid;
    } else if (first == "port") {
      std::string address;
      if (words >> address) w.ports.push_back(address);
    } else if (first == "device") {
      w.device = ParseCounters(words);
    } else if (first == "qp1") {
      w.qp1 = ParseCounters(words);
    } else if (first == "cm") {
      std::string kind;
      if (words >> kind) w.cm.emplace_back(kind, ParseCounters(words));
    } else if (first == "qp") {
      QpWireCounters q;
      std::string number;
      words >> number >> q.side;
      char* end = nullptr;
      q.qpn = static_cast<uint32_t>(strtoul(number.c_str(), &end, 16));
      if (number.empty() || *end != '\0' || (q.side != "requester" && q.side != "responder")) continue;
      q.counters = ParseCounters(words);
      w.qps.push_back(std::move(q));
    }
  }
  return w;
}

HostStatus CollectStatus(fabric::HostRegistry& r) {
  HostStatus s;
  // Entries of dead processes are reclaimed first: what is listed is what lives.
  s.reclaimed = r.ReclaimDead();
  s.registry = r.name();
  struct stat st {};
  if (stat(("/dev/shm" + r.name()).c_str(), &st) == 0) {
    s.allocated_kib = static_cast<long long>(st.st_blocks) / 2;
    s.capacity_kib = static_cast<long long>(st.st_size) / 1024;
  }
  std::unordered_map<uint64_t, bool> alive;  // by token
  s.tables = CountTables(r, alive);
  s.qps = ReadQps(r, alive);
  AskWire(r, s);
  for (QpStatus& q : s.qps)
    for (const ProcessWire& w : s.wire)
      if (w.pid == q.pid)
        for (const QpWireCounters& c : w.qps)
          if (c.qpn == q.qpn) q.wire.push_back(&c);
  return s;
}

void PrintStatusText(const HostStatus& s) {
  printf("host registry /dev/shm%s\n", s.registry.c_str());
  if (s.allocated_kib >= 0) printf("  size         %lld KiB allocated (capacity %lld KiB)\n", s.allocated_kib, s.capacity_kib);
  if (s.reclaimed != 0) printf("  reclaimed    %u entries of dead processes\n", s.reclaimed);
  for (const TableUse& t : s.tables) {
    printf("  %-12s", t.name.c_str());
    if (t.by_pid.empty()) printf(" none");
    for (auto [pid, n] : t.by_pid) printf(" pid %d: %d", pid, n);
    printf("\n");
  }
  if (!s.qps.empty()) printf("QPs (number, process, type, state, peer):\n");
  for (const QpStatus& q : s.qps) {
    printf("  qp 0x%x  pid %d  ", q.qpn, q.pid);
    if (!q.readable) {
      printf("(its endpoint cannot be read)\n");
      continue;
    }
    printf("%s %s", q.type.c_str(), q.state.c_str());
    if (q.dest_qpn != 0) printf("  peer qp 0x%x", q.dest_qpn);
    if (q.peer_pid != 0) printf(" (pid %d)", q.peer_pid);
    printf("\n");
  }
  if (!s.wire_error.empty()) {
    printf("wire: %s\n", s.wire_error.c_str());
    return;
  }
  if (s.wire.empty()) printf("wire (RoCEv2): no process of this host is on the wire\n");
  else printf("wire (RoCEv2) by process:\n");
  for (const ProcessWire& w : s.wire) {
    std::string text = "  " + w.text;  // each line indented under the heading
    for (size_t at = text.find('\n'); at != std::string::npos && at + 1 < text.size(); at = text.find('\n', at + 1))
      text.insert(at + 1, "  ");
    printf("%s", text.c_str());
  }
}

}  // namespace softverbs::cli
