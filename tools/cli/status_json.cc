// `softverbs status --json`: the schema is documented in docs/device.md ("softverbs status");
// "schema" is bumped when a field changes meaning or goes away (fields may be added).
#include <arpa/inet.h>

#include <cstdio>
#include <string>

#include "core/device.h"
#include "tools/cli/status.h"

namespace softverbs::cli {
namespace {

constexpr int kSchema = 1;

// The length of the UTF-8 sequence at s[i] (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF), 0 if it is not one.
size_t Utf8Length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  if (n == 3 && ((c == 0xe0 && b(i + 1) < 0xa0) || (c == 0xed && b(i + 1) >= 0xa0))) return 0;
  if (n == 4 && ((c == 0xf0 && b(i + 1) < 0x90) || (c == 0xf4 && b(i + 1) >= 0x90))) return 0;
  return n;
}

std::string CountersJson(const Counters& counters) {
  std::string out = "{";
  for (const auto& [name, value] : counters)
    out += (out.size() > 1 ? ", " : "") + JsonString(name) + ": " + std::to_string(value);
  return out + "}";
}

std::string Number(long long v) { return v < 0 ? "null" : std::to_string(v); }

std::string ProcessJson(pid_t pid, const HostStatus& s) {
  std::string out = "{\"pid\": " + std::to_string(pid);
  for (const TableUse& t : s.tables) {
    if (t.key == "processes") continue;
    auto it = t.by_pid.find(pid);
    out += ", " + JsonString(t.key) + ": " + std::to_string(it == t.by_pid.end() ? 0 : it->second);
  }
  const ProcessWire* wire = nullptr;
  for (const ProcessWire& w : s.wire)
    if (w.pid == pid) wire = &w;
  out += ", \"wire\": ";
  if (wire == nullptr) return out + "null}";
  out += "{\"ports\": [";
  for (size_t i = 0; i < wire->ports.size(); ++i) out += (i ? ", " : "") + JsonString(wire->ports[i]);
  out += "], \"counters\": " + CountersJson(wire->device) + ", \"qp1\": " + CountersJson(wire->qp1) + ", \"cm\": {";
  for (size_t i = 0; i < wire->cm.size(); ++i)
    out += (i ? ", " : "") + JsonString(wire->cm[i].first) + ": " + CountersJson(wire->cm[i].second);
  return out + "}}}";
}

std::string QpJson(const QpStatus& q) {
  std::string out = "{\"qpn\": " + std::to_string(q.qpn) + ", \"pid\": " + std::to_string(q.pid);
  if (!q.readable) return out + ", \"type\": null, \"state\": null, \"dest_qpn\": null, \"peer_pid\": null, \"counters\": {}}";
  out += ", \"type\": " + JsonString(q.type) + ", \"state\": " + JsonString(q.state);
  out += ", \"dest_qpn\": " + (q.dest_qpn ? std::to_string(q.dest_qpn) : "null");
  out += ", \"peer_pid\": " + (q.peer_pid ? std::to_string(q.peer_pid) : "null");
  out += ", \"counters\": {";
  for (size_t i = 0; i < q.wire.size(); ++i)
    out += (i ? ", " : "") + JsonString(q.wire[i]->side) + ": " + CountersJson(q.wire[i]->counters);
  return out + "}}";
}

}  // namespace

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(s, i, n);
      i += n;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

std::string DeviceJson(const std::string& libdir) {
  const core::DeviceIdentity& id = core::Identity();
  const auto& g = id.node_guid;
  char guid[32];
  snprintf(guid, sizeof guid, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
  std::string out = "{\"name\": " + JsonString(id.name) + ", \"node_guid\": " + JsonString(guid) +
                    ", \"vendor_id\": " + std::to_string(id.vendor_id) +
                    ", \"vendor_part_id\": " + std::to_string(id.vendor_part_id) +
                    ", \"mlx5_identity\": " + (id.mlx5_identity ? "true" : "false") +
                    ", \"ports\": [{\"port\": 1, \"state\": \"ACTIVE\", \"link_layer\": \"Ethernet\", \"max_mtu\": 4096, " +
                    "\"active_mtu\": " + std::to_string(core::MtuBytes(core::ActiveMtu())) + "}]" +
                    ", \"gids\": [";
  core::GidTable gids = core::GidTable::Read();
  bool first = true;
  for (uint32_t i = 0; i < core::DeviceLimits::kGidTableLen; ++i) {
    const core::GidEntry& e = gids.at(i);
    if (!e.valid) continue;
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, e.gid.data(), text, sizeof text);
    out += (first ? "" : ", ") + std::string("{\"index\": ") + std::to_string(i) + ", \"gid\": " + JsonString(text) + "}";
    first = false;
  }
  return out + "], \"libraries\": " + (libdir.empty() ? "null" : JsonString(libdir)) + "}";
}

std::string StatusJson(const HostStatus& s, const std::string& device_json) {
  std::string out = "{\"schema\": " + std::to_string(kSchema) + ",\n \"device\": " + device_json;
  out += ",\n \"registry\": {\"name\": " + JsonString(s.registry) + ", \"allocated_kib\": " + Number(s.allocated_kib) +
         ", \"capacity_kib\": " + Number(s.capacity_kib) + ", \"reclaimed\": " + std::to_string(s.reclaimed) + "}";
  out += ",\n \"processes\": [";
  bool first = true;
  for (const TableUse& t : s.tables) {
    if (t.key != "processes") continue;
    for (const auto& [pid, n] : t.by_pid) {
      out += (first ? "\n  " : ",\n  ") + ProcessJson(pid, s);
      first = false;
    }
  }
  out += "],\n \"qps\": [";
  for (size_t i = 0; i < s.qps.size(); ++i) out += (i ? ",\n  " : "\n  ") + QpJson(s.qps[i]);
  out += "],\n \"wire_error\": " + (s.wire_error.empty() ? std::string("null") : JsonString(s.wire_error));
  return out + "}\n";
}

}  // namespace softverbs::cli
