#include "transport/raw/raw_port.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "base/log.h"
#include "transport/raw/esp.h"

namespace softverbs::transport::raw {
namespace {

std::mutex g_ports_mu;
std::map<int, std::weak_ptr<RawPort>>& Ports() {
  static auto* ports = new std::map<int, std::weak_ptr<RawPort>>;
  return *ports;
}

}  // namespace

Result<std::shared_ptr<RawPort>> RawPort::Get(const fabric::raw::Interface& itf) {
  std::lock_guard lock(g_ports_mu);
  if (auto port = Ports()[itf.index].lock()) return port;
  auto socket = fabric::raw::PacketSocket::Open(itf.index);
  if (!socket.ok()) return socket.status();
  UniqueFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return Status(errno, "eventfd failed");
  std::shared_ptr<RawPort> port(new RawPort(itf, std::move(socket.value()), std::move(stop)));
  Ports()[itf.index] = port;
  SV_LOG(kDebug, "raw port: frames on %s (ifindex %d, mtu %u)", itf.name.c_str(), itf.index, itf.mtu);
  return port;
}

RawPort::RawPort(fabric::raw::Interface itf, fabric::raw::PacketSocket socket, UniqueFd stop)
    : interface_(std::move(itf)), socket_(std::move(socket)), stop_(std::move(stop)) {
  thread_ = std::thread([this] { Run(); });
}

RawPort::~RawPort() {
  const uint64_t one = 1;
  (void)!write(stop_.get(), &one, sizeof one);
  thread_.join();
}

uint64_t RawPort::AddRule(const FlowRule& rule, RawSink* sink) {
  std::unique_lock lock(mu_);
  if (rule.egress) {
    has_egress_.store(true, std::memory_order_release);
    return egress_.Add(rule);
  }
  return table_.Add(rule, sink);
}

bool RawPort::RemoveRule(uint64_t id) {
  // Exclusive: once this returns, no steering in progress still holds the rule's QP.
  std::unique_lock lock(mu_);
  if (id & EgressTable::kIdBit) {
    const bool removed = egress_.Remove(id);
    has_egress_.store(!egress_.empty(), std::memory_order_release);
    return removed;
  }
  return table_.Remove(id);
}

bool RawPort::AddressedHere(const fabric::raw::FrameView& v, bool group_too) const {
  if (v.dst_mac[0] & 1) return group_too;
  return memcmp(v.dst_mac, interface_.mac, 6) == 0;
}

void RawPort::Steer(std::span<const uint8_t> frame, FrameSource source, const RawSink* sender) {
  fabric::raw::FrameView view;
  if (!fabric::raw::ParseFrame(frame, &view)) return;
  thread_local std::vector<Delivery> to;
  std::shared_lock lock(mu_);
  table_.Steer(frame, view, source, sender, &to);
  if (to.empty() && source != FrameSource::kSentAway) counters_.unsteered.fetch_add(1, std::memory_order_relaxed);
  SV_LOG(kTrace, "raw port %s: %s frame of %zu bytes (type 0x%04x) to %zu QP(s)", interface_.name.c_str(),
         source == FrameSource::kReceived ? "received" : source == FrameSource::kLoopback ? "looped-back" : "sent",
         frame.size(), view.ether_type, to.size());
  for (const Delivery& d : to) {
    // An ESP packet under a DECRYPT rule is decrypted first; other frames have nothing to decrypt.
    if (d.mark.decrypt && EspOffset(frame, view) != 0) {
      DeliverDecrypted(d, frame);
      continue;
    }
    d.sink->OnFrame(frame, view, d.mark);
    counters_.steered.fetch_add(1, std::memory_order_relaxed);
  }
}

void RawPort::DeliverDecrypted(const Delivery& d, std::span<const uint8_t> frame) {
  static std::atomic<uint32_t> failures{0};
  thread_local std::vector<uint8_t> plain;
  plain.assign(frame.begin(), frame.end());
  fabric::raw::FrameView view;
  if (!d.mark.decrypt->DecryptFrame(plain) || !fabric::raw::ParseFrame(plain, &view)) {
    // As a NIC's inline decryption: a packet whose ICV does not verify is not delivered.
    const uint32_t n = failures.fetch_add(1, std::memory_order_relaxed);
#define SV_ESP_DROPPED "raw port %s: an ESP frame of %zu bytes failed authentication (ICV) or is too short for its " \
                       "IV, trailer and ICV: dropped, not delivered"
    if (n < 16)  // the first ones as errors, the rest (a flood) at debug level
      SV_LOG(kError, SV_ESP_DROPPED, interface_.name.c_str(), frame.size());
    else
      SV_LOG(kDebug, SV_ESP_DROPPED, interface_.name.c_str(), frame.size());
#undef SV_ESP_DROPPED
    return;
  }
  d.sink->OnFrame(plain, view, d.mark);
  counters_.steered.fetch_add(1, std::memory_order_relaxed);
}

Status RawPort::Send(std::span<const std::vector<uint8_t>> frames, const RawSink* from) {
  thread_local std::vector<std::vector<uint8_t>> egress;
  if (has_egress_.load(std::memory_order_acquire)) {
    std::shared_lock lock(mu_);
    egress_.Apply(frames, &egress);
    frames = egress;
    if (frames.empty()) return Status::Ok();
  }
  thread_local std::vector<std::vector<iovec>> iovs;
  iovs.resize(frames.size());
  for (size_t i = 0; i < frames.size(); ++i)
    iovs[i].assign(1, iovec{const_cast<uint8_t*>(frames[i].data()), frames[i].size()});
  SV_RETURN_IF_ERROR(socket_.Send(std::span<const std::vector<iovec>>(iovs.data(), frames.size())));
  counters_.sent.fetch_add(frames.size(), std::memory_order_relaxed);
  if (interface_.loopback) return Status::Ok();  // the kernel brings them back (see the header)
  for (const auto& f : frames) {
    fabric::raw::FrameView v;
    if (!fabric::raw::ParseFrame(f, &v)) continue;
    Steer(f, AddressedHere(v, true) ? FrameSource::kLoopback : FrameSource::kSentAway, from);
  }
  return Status::Ok();
}

void RawPort::Run() {
  pollfd fds[2] = {{socket_.fd(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;
    if (!(fds[0].revents & POLLIN)) continue;
    while (socket_.Receive([this](const fabric::raw::ReceivedFrame& f) {
      counters_.received.fetch_add(1, std::memory_order_relaxed);
      FrameSource source = FrameSource::kReceived;
      if (f.direction == fabric::raw::PacketDirection::kOutgoing) {
        // Another socket's frame leaving the port. On a loopback interface it comes back as
        // received too; elsewhere only a unicast to this port's MAC is this host's loopback.
        fabric::raw::FrameView v;
        const bool here = !interface_.loopback && fabric::raw::ParseFrame(f.bytes, &v) && AddressedHere(v, false);
        source = here ? FrameSource::kLoopback : FrameSource::kSentAway;
        if (interface_.loopback) return;
      }
      Steer(f.bytes, source, nullptr);
    }) == fabric::raw::PacketSocket::kBatch) {
    }
  }
}

}  // namespace softverbs::transport::raw
