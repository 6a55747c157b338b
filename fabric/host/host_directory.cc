#include "fabric/host/host_directory.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "fabric/host/death_watch.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/pin_line.h"

namespace softverbs::fabric {

Result<void*> Peer::At(SharedRef ref, HostRegistry& registry) {
  if (ref.segment >= SharedArena::kMaxSegments || ref.offset == 0)
    return Invalid("a shared reference outside the peer's arena");
  if (const RemoteSegment* mapped = mapped_[ref.segment].load(std::memory_order_acquire)) {
    if (void* p = mapped->At(ref.offset)) return p;
    return Invalid("a shared reference outside the peer's arena");
  }
  std::lock_guard lock(mu_);
  auto& seg = segments_[ref.segment];
  if (!seg) {
    auto& entry = EntryOf<ProcessEntry>(registry.processes().slot(process_slot_));
    int remote_fd = entry.segment_fds[ref.segment].load(std::memory_order_acquire);
    if (remote_fd < 0) return Invalid("the peer has not published that arena segment");
    auto fd = process_->BorrowFd(remote_fd);
    if (!fd.ok()) return fd.status();
    auto mapped = RemoteSegment::Map(fd.value());
    if (!mapped.ok()) return mapped.status();
    seg = std::move(mapped.value());
    mapped_[ref.segment].store(seg.get(), std::memory_order_release);
  }
  void* p = seg->At(ref.offset);
  if (p == nullptr) return Invalid("a shared reference outside the peer's arena");
  return p;
}

Peer::Peer(uint32_t process_slot, std::shared_ptr<PeerProcess> process)
    : process_slot_(process_slot), process_(std::move(process)) {
  watched_ = !process_->is_self() && WatchDeath(process_->pidfd(), dead_);
}

bool Peer::CheckAlive(int64_t now) {
  int64_t last = checked_ns_.load(std::memory_order_relaxed);
  if (now - last < kLivenessPeriodMs * 1000000) return true;
  if (!checked_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return true;
  if (process_->IsAlive()) return true;
  dead_->store(true, std::memory_order_release);
  return false;
}

std::atomic<uint32_t> internal::g_fork_generation{0};

namespace {
void OnFork() { internal::g_fork_generation.fetch_add(1, std::memory_order_relaxed); }
// Registered when the library is loaded, before any LocalProcess exists: ForkGeneration is then
// a load (it was a guard check and a call on every key pin).
[[maybe_unused]] const int g_fork_handler = pthread_atfork(nullptr, nullptr, OnFork);
}  // namespace

Result<LocalProcess*> LocalProcess::Get() {
  static std::mutex mu;
  static LocalProcess* current = nullptr;
  std::lock_guard lock(mu);
  ProcessToken self = ProcessToken::Self();
  if (self.empty()) return Status(EIO, "cannot identify this process (/proc/self/stat unreadable)");
  // After fork() the child is a new member of the host; the parent's record stays the parent's.
  if (current != nullptr && current->token_ == self) return current;
  auto registry = HostRegistry::Get();
  if (!registry.ok()) return registry.status();
  // Joining is when the entries of processes that died are reclaimed: `softverbs status` and the
  // tables then show live processes only, and nothing waits for a table to fill.
  registry.value()->ReclaimDead();
  auto slot = registry.value()->processes().Allocate(self);
  if (!slot.ok()) return Status(ENOMEM, "no process slot left on this host: " + slot.status().rule());
  auto& entry = EntryOf<ProcessEntry>(registry.value()->processes().slot(*slot));
  for (auto& fd : entry.segment_fds) fd.store(-1, std::memory_order_relaxed);
  // The hazard lines a dead predecessor in this slot left: nobody holds them now.
  HazardLine* lines = registry.value()->hazards(*slot);
  for (uint32_t i = 0; i < HostRegistry::kHazardLinesPerProcess; ++i) {
    lines[i].tid.store(0, std::memory_order_relaxed);
    for (auto& e : lines[i].held) e.store(0, std::memory_order_release);
  }
  AllowPeerAccess();
  const uint32_t generation = registry.value()->processes().slot(*slot).generation.load(std::memory_order_acquire);
  current = new LocalProcess(registry.value(), *slot, self, PinnerId(*slot, generation));  // lives until exit, like the process
  return current;
}

Result<SharedRef> LocalProcess::Allocate(size_t size) {
  auto ref = arena_.Allocate(size);
  if (!ref.ok()) return ref;
  auto& entry = EntryOf<ProcessEntry>(registry_->processes().slot(slot_));
  entry.segment_fds[ref->segment].store(arena_.SegmentFd(ref->segment), std::memory_order_release);
  return ref;
}

Result<std::shared_ptr<Peer>> LocalProcess::PeerAt(uint32_t slot) {
  if (slot >= registry_->processes().extent()) return Invalid("no such process slot");
  ProcessToken token(registry_->processes().slot(slot).owner.load(std::memory_order_acquire));
  if (token.empty()) return Status(ESRCH, "the process slot is free: its process is gone");
  std::lock_guard lock(mu_);
  if (auto it = peers_.find(token.raw()); it != peers_.end()) return it->second;
  // Peers that exited are forgotten here (their fds and mappings go with them); in-flight users
  // hold their own reference.
  std::erase_if(peers_, [](const auto& entry) { return !entry.second->process().IsAlive(); });
  auto process = PeerProcess::Open(token);
  if (!process.ok()) return process.status();
  auto peer = std::make_shared<Peer>(slot, std::move(process.value()));
  peers_.emplace(token.raw(), peer);
  return peer;
}

}  // namespace softverbs::fabric
