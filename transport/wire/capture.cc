#include "transport/wire/capture.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "base/log.h"
#include "fabric/host/host_directory.h"

namespace softverbs::transport {

fabric::packet::PcapWriter* ProcessCapture() {
  static std::mutex mu;
  static fabric::packet::PcapWriter* writer = nullptr;
  static bool opened = false;
  static uint32_t generation = 0;
  std::lock_guard lock(mu);
  if (opened && generation == fabric::LocalProcess::ForkGeneration()) return writer;
  // A child of fork() writes a file of its own: the parent's records would interleave with its.
  opened = true;
  generation = fabric::LocalProcess::ForkGeneration();
  writer = nullptr;  // the parent's writer belongs to the parent (its buffer is flushed per record)
  const char* path = getenv("SOFTVERBS_PCAP");
  if (path == nullptr || *path == '\0') return nullptr;
  std::string name = path;
  if (size_t at = name.find("%p"); at != std::string::npos) name.replace(at, 2, std::to_string(getpid()));
  auto opened_writer = fabric::packet::PcapWriter::Open(name);
  if (!opened_writer.ok()) {
    SV_LOG(kError, "SOFTVERBS_PCAP=%s: %s", path, opened_writer.status().rule().c_str());
    return nullptr;
  }
  writer = opened_writer.value().release();  // lives as long as the process
  return writer;
}

}  // namespace softverbs::transport
