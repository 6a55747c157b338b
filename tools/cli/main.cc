// softverbs: the command-line tool.
//
//   softverbs run -- <program> [args]   run a program against the softverbs libraries, with the
//                                       device view (sysfs / /dev nodes) shown to it
//   softverbs sysfs-view [DIR]          print the device view, or write it into DIR
//   softverbs devices                   list the device and its GID table
//   softverbs status [--json]           what the host holds: processes, QPs (type, state, peer), keys,
//                                       SRQs, XRC domains, wire counters (tools/cli/status.h)
//   softverbs trace -w FILE -- <program> [args]
//                                       run it as `run` does and record every RoCEv2 packet of it
//                                       and its children, same-host traffic included, into FILE
//   softverbs version
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <arpa/inet.h>

#include "core/device.h"
#include "tools/cli/pcap_merge.h"
#include "tools/cli/status.h"
#include "tools/cli/sysfs_view.h"
#include "fabric/host/host_registry.h"

namespace softverbs::cli {
namespace {

bool Exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// Where the drop-in libraries are: $SOFTVERBS_LIBDIR, else next to this binary in an install
// (bin/../<libdir>/softverbs: the Debian package's /usr/lib/softverbs, packaging/package.cmake)
// or in the build tree (bin/../lib). The private directory comes first: next to an installed
// /usr/bin, ../lib may hold the system's own libibverbs.so.1.
std::string LibDir() {
  if (const char* env = getenv("SOFTVERBS_LIBDIR"); env && *env) return env;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  std::string bindir(self);
  bindir.resize(bindir.rfind('/'));
  for (const std::string& candidate : {bindir + "/../" SOFTVERBS_INSTALL_LIBDIR, bindir + "/../lib"}) {
    if (Exists(candidate + "/libibverbs.so.1")) {
      char real[PATH_MAX];
      return realpath(candidate.c_str(), real) ? std::string(real) : candidate;
    }
  }
  return "";
}

int Usage(FILE* out) {
  fprintf(out,
          "usage: softverbs <command>\n"
          "  run -- <program> [args]  run an unmodified RDMA program over softverbs0\n"
          "  sysfs-view [DIR]         print the device view run shows (or write it into DIR)\n"
          "  devices                  show softverbs0 and its GID table\n"
          "  status [--json]          show what this host holds (processes, QPs, counters)\n"
          "  trace -w FILE -- <program> [args]\n"
          "                           run it, and capture its RoCEv2 packets (same host too) in FILE\n"
          "  version                  print the version\n"
          "environment: SOFTVERBS_LOG=error|warn|info|debug|trace explains every refused verb;\n"
          "             SOFTVERBS_HOST=<name> makes a separate host;\n"
          "             SOFTVERBS_VIEW=0 runs without the device view; see README.md.\n");
  return out == stderr ? 2 : 0;
}

// After what is there: a sanitizer runtime preloaded by the caller must stay first.
void AppendPreload(const std::string& lib) {
  std::string v;
  if (const char* old = getenv("LD_PRELOAD"); old && *old) v = std::string(old) + ":";
  setenv("LD_PRELOAD", (v + lib).c_str(), 1);
}

// Shows the program the device view through libsoftverbs-view.so (docs/ecosystem.md). Without
// it the program still runs; only tools that read sysfs or /dev/infiniband miss the device.
void ShowView(const std::string& libdir) {
  const char* want = getenv("SOFTVERBS_VIEW");
  if (want && strcmp(want, "0") == 0) {
    unsetenv("SOFTVERBS_VIEW");
    return;
  }
  const std::string preload = libdir + "/libsoftverbs-view.so";
  auto view = PrepareView();
  if (!view.ok() || !Exists(preload)) {
    fprintf(stderr, "softverbs run: no device view (%s); running without it\n",
            view.ok() ? (preload + " is missing").c_str() : view.status().rule().c_str());
    unsetenv("SOFTVERBS_VIEW");
    return;
  }
  setenv("SOFTVERBS_VIEW", view.value().c_str(), 1);
  AppendPreload(preload);
}

int SysfsView(int argc, char** argv) {
  std::vector<ViewEntry> entries = RenderView();
  if (argc > 0) {
    auto s = WriteView(entries, argv[0]);
    if (!s.ok()) fprintf(stderr, "softverbs sysfs-view: %s\n", s.rule().c_str());
    return s.ok() ? 0 : 1;
  }
  for (const ViewEntry& e : entries) {
    if (e.kind == ViewEntry::Kind::kDir) continue;
    const char* arrow = e.kind == ViewEntry::Kind::kSymlink ? " -> " : ": ";
    std::string c = e.content;
    if (!c.empty() && c.back() == '\n') c.pop_back();
    printf("/%s%s%s\n", e.path.c_str(), arrow, c.c_str());
  }
  return 0;
}

int Run(int argc, char** argv) {
  int first = 0;
  if (argc > 0 && strcmp(argv[0], "--") == 0) first = 1;
  if (first >= argc) {
    fprintf(stderr, "softverbs run: name a program: softverbs run -- <program> [args]\n");
    return 2;
  }
  std::string libdir = LibDir();
  if (libdir.empty()) {
    fprintf(stderr, "softverbs run: cannot find libibverbs.so.1 next to this binary; set SOFTVERBS_LIBDIR\n");
    return 2;
  }
  std::string path = libdir;
  if (const char* old = getenv("LD_LIBRARY_PATH"); old && *old) path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  ShowView(libdir);
  execvp(argv[first], argv + first);
  fprintf(stderr, "softverbs run: cannot run %s: %s\n", argv[first], strerror(errno));
  return 127;
}

// The program's processes each write their own capture (SOFTVERBS_PCAP=<dir>/%p.pcap, next to
// FILE); when the program ends they are merged into FILE in time order and removed. Only the
// processes started here are traced: a process opens its capture when it creates its first QP,
// so a capture of a running one would lack its connections' first packets (docs/device.md).
int Trace(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[0], "-w") != 0) {
    fprintf(stderr, "softverbs trace: usage: softverbs trace -w FILE -- <program> [args]\n");
    return 2;
  }
  const std::string output = argv[1];
  std::string parts = output + ".parts-XXXXXX";
  if (mkdtemp(parts.data()) == nullptr) {
    fprintf(stderr, "softverbs trace: cannot create %s: %s\n", parts.c_str(), strerror(errno));
    return 1;
  }
  setenv("SOFTVERBS_PCAP", (parts + "/%p.pcap").c_str(), 1);
  const pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "softverbs trace: fork: %s\n", strerror(errno));
    rmdir(parts.c_str());
    return 1;
  }
  if (child == 0) _exit(Run(argc - 2, argv + 2));
  // Ctrl-C reaches the program (same process group); this process outlives it to merge.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  int wstatus = 0;
  while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  std::vector<std::string> files;
  if (DIR* d = opendir(parts.c_str())) {
    while (dirent* e = readdir(d))
      if (strstr(e->d_name, ".pcap") != nullptr) files.push_back(parts + "/" + e->d_name);
    closedir(d);
  }
  const Status merged = MergePcaps(files, output);
  for (const std::string& f : files) unlink(f.c_str());
  rmdir(parts.c_str());
  if (!merged.ok()) fprintf(stderr, "softverbs trace: %s\n", merged.rule().c_str());
  else fprintf(stderr, "softverbs trace: %zu process capture(s) merged into %s\n", files.size(), output.c_str());
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return merged.ok() ? WEXITSTATUS(wstatus) : 1;
}

std::string GidString(const core::Gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.data(), buf, sizeof(buf));
  return buf;
}

int Devices() {
  const core::DeviceIdentity& id = core::Identity();
  const auto& g = id.node_guid;
  printf("%s  node GUID %02x%02x:%02x%02x:%02x%02x:%02x%02x  vendor 0x%x part %u%s\n", id.name.c_str(),
         g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], id.vendor_id, id.vendor_part_id,
         id.mlx5_identity ? "  (mlx5 identity)" : "");
  printf("  port 1: ACTIVE, Ethernet (RoCE v2), MTU 4096\n");
  core::GidTable gids = core::GidTable::Read();
  for (uint32_t i = 0; i < core::DeviceLimits::kGidTableLen; ++i) {
    const core::GidEntry& e = gids.at(i);
    if (e.valid) printf("  GID[%2u] %s\n", i, GidString(e.gid).c_str());
  }
  printf("  libraries: %s\n", LibDir().empty() ? "(not found)" : LibDir().c_str());
  return 0;
}

int StatusCommand(int argc, char** argv) {
  const bool json = argc > 0 && strcmp(argv[0], "--json") == 0;
  if (argc > (json ? 1 : 0)) {
    fprintf(stderr, "softverbs status: unknown argument '%s' (usage: softverbs status [--json])\n", argv[json ? 1 : 0]);
    return 2;
  }
  auto reg = fabric::HostRegistry::Get();
  if (!reg.ok()) {
    fprintf(stderr, "softverbs status: %s\n", reg.status().rule().c_str());
    return 1;
  }
  HostStatus status = CollectStatus(*reg.value());
  if (json) printf("%s", StatusJson(status, DeviceJson(LibDir())).c_str());
  else PrintStatusText(status);
  return 0;
}

}  // namespace
}  // namespace softverbs::cli

int main(int argc, char** argv) {
  using namespace softverbs::cli;
  if (argc < 2) return Usage(stderr);
  std::string cmd = argv[1];
  if (cmd == "run") return Run(argc - 2, argv + 2);
  if (cmd == "devices") return Devices();
  if (cmd == "sysfs-view") return SysfsView(argc - 2, argv + 2);
  if (cmd == "status") return StatusCommand(argc - 2, argv + 2);
  if (cmd == "trace") return Trace(argc - 2, argv + 2);
  if (cmd == "version" || cmd == "--version") return printf("softverbs %s\n", SOFTVERBS_VERSION) < 0;
  if (cmd == "help" || cmd == "--help" || cmd == "-h") return Usage(stdout);
  fprintf(stderr, "softverbs: unknown command '%s'\n", cmd.c_str());
  return Usage(stderr);
}
