// sv_private_qp1_bridge (qp1_bridge.h): QP1 of the wire fabric for librdmacm's CM agent.
#include "abi/verbs/qp1_bridge.h"

#include <algorithm>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "abi/common/export.h"
#include "abi/verbs/objects.h"
#include "base/log.h"
#include "core/device.h"
#include "transport/wire/last_words.h"
#include "transport/wire/wire_fabric.h"

namespace softverbs::abi {
namespace {

class Qp1BridgeHandler : public transport::Qp1Handler {
 public:
  void Set(SvMadCallback callback, void* arg) {
    std::lock_guard lock(mu_);
    callback_ = callback;
    arg_ = arg;
  }
  void OnMad(const transport::Qp1Datagram& d) override {
    std::lock_guard lock(mu_);
    if (callback_ != nullptr) callback_(arg_, d.mad.data(), d.mad.size(), d.sgid.data(), d.dgid.data(), d.forwarded);
  }
  void SetReporter(SvReportCallback report, void* arg) {
    std::lock_guard lock(mu_);
    report_ = report;
    report_arg_ = arg;
  }
  std::string Report() override {
    std::lock_guard lock(mu_);
    const char* lines = report_ != nullptr ? report_(report_arg_) : nullptr;
    return lines != nullptr ? lines : "";
  }

 private:
  std::mutex mu_;
  SvMadCallback callback_ = nullptr;
  void* arg_ = nullptr;
  SvReportCallback report_ = nullptr;
  void* report_arg_ = nullptr;
};

Qp1BridgeHandler& TheQp1Handler() {
  static auto* handler = new Qp1BridgeHandler();  // the wire may call it until the process ends
  return *handler;
}

int Qp1Attach(ibv_context* context, SvMadCallback callback, void* arg) {
  if (context == nullptr) return EINVAL;
  core::Context& core = *ToSv(context)->core;
  transport::WireFabric& wire = transport::WireFabric::Get(core.local());
  const core::GidTable gids = core.gids();
  std::vector<transport::Gid16> listen;
  for (uint32_t i = 0; i < core::DeviceLimits::kGidTableLen; ++i)
    if (gids.at(i).valid) listen.push_back(gids.at(i).gid);
  wire.Listen(listen);
  TheQp1Handler().Set(callback, arg);
  wire.SetQp1Handler(callback != nullptr ? &TheQp1Handler() : nullptr);
  return 0;
}

int Qp1SendMad(ibv_context* context, const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad, size_t length) {
  if (context == nullptr || sgid == nullptr || dgid == nullptr || mad == nullptr) return EINVAL;
  core::Context& core = *ToSv(context)->core;
  transport::Gid16 s, d;
  std::copy_n(sgid, 16, s.begin());
  std::copy_n(dgid, 16, d.begin());
  Status sent = transport::WireFabric::Get(core.local()).SendMad(s, d, {mad, length});
  if (!sent.ok()) SV_LOG(kInfo, "rdma_cm: a MAD could not leave: %s", sent.rule().c_str());
  return sent.ok() ? 0 : sent.code();
}

void Qp1SetReporter(SvReportCallback report, void* arg) { TheQp1Handler().SetReporter(report, arg); }

int Qp1ProcessSlot(ibv_context* context, uint32_t* slot) {
  if (context == nullptr || slot == nullptr) return EINVAL;
  *slot = ToSv(context)->core->local().slot();
  return 0;
}

void Qp1ArmLastWords(uint64_t token, const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad, size_t length) {
  transport::LastWords::Get().Arm(token, std::span<const uint8_t, 16>(sgid, 16), std::span<const uint8_t, 16>(dgid, 16),
                                  {mad, length});
}

void Qp1DisarmLastWords(uint64_t token) { transport::LastWords::Get().Disarm(token); }

int Qp1ForwardMad(ibv_context* context, uint32_t slot, const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad,
                  size_t length) {
  if (context == nullptr || sgid == nullptr || dgid == nullptr || mad == nullptr) return EINVAL;
  transport::Gid16 s, d;
  std::copy_n(sgid, 16, s.begin());
  std::copy_n(dgid, 16, d.begin());
  static_assert(transport::WireFabric::kEveryOtherProcess == UINT32_MAX);
  Status sent = transport::WireFabric::Get(ToSv(context)->core->local()).ForwardMad(slot, s, d, {mad, length});
  return sent.ok() ? 0 : sent.code();
}

constexpr SvQp1Bridge kQp1Bridge{sizeof(SvQp1Bridge), Qp1Attach,       Qp1SendMad,         Qp1SetReporter,
                                 Qp1ProcessSlot,      Qp1ArmLastWords, Qp1DisarmLastWords, Qp1ForwardMad};

}  // namespace
}  // namespace softverbs::abi

SV_EXPORT const SvQp1Bridge* sv_private_qp1_bridge(void) { return &softverbs::abi::kQp1Bridge; }
