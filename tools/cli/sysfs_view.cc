#include "tools/cli/sysfs_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <net/if.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/device.h"
#include "core/device_limits.h"

namespace softverbs::cli {
namespace {

using L = core::DeviceLimits;
using Kind = ViewEntry::Kind;

// The kernel's formats (drivers/infiniband/core/sysfs.c): GUIDs and GIDs as 16-bit groups.
std::string Groups(const uint8_t* bytes, size_t n) {
  std::string s;
  char buf[8];
  for (size_t i = 0; i < n; i += 2) {
    snprintf(buf, sizeof(buf), "%s%02x%02x", i ? ":" : "", bytes[i], bytes[i + 1]);
    s += buf;
  }
  return s + "\n";
}

std::string Hex(uint32_t v, int digits) {
  char buf[16];
  snprintf(buf, sizeof(buf), "0x%0*x\n", digits, v);
  return buf;
}

// rate_show(): "<Gb/s> Gb/sec (<width> <speed>)"; EDR is 25 Gb/s per lane, 4X is four lanes.
std::string Rate() {
  static_assert(L::kActiveWidth == 2 && L::kActiveSpeed == 32, "update the rate string");
  return "100 Gb/sec (4X EDR)\n";
}

void AddPort(std::vector<ViewEntry>& v, const std::string& port) {
  v.push_back({port, Kind::kDir, ""});
  v.push_back({port + "/state", Kind::kFile, "4: ACTIVE\n"});
  static_assert(L::kPhysStateLinkUp == 5);
  v.push_back({port + "/phys_state", Kind::kFile, "5: LinkUp\n"});
  v.push_back({port + "/link_layer", Kind::kFile, "Ethernet\n"});
  v.push_back({port + "/rate", Kind::kFile, Rate()});
  v.push_back({port + "/lid", Kind::kFile, "0x0\n"});  // Ethernet: no LIDs
  v.push_back({port + "/sm_lid", Kind::kFile, "0x0\n"});
  v.push_back({port + "/lid_mask_count", Kind::kFile, "0\n"});
  v.push_back({port + "/sm_sl", Kind::kFile, "0\n"});
  v.push_back({port + "/cap_mask", Kind::kFile, Hex(L::kPortCapFlags, 8)});
  v.push_back({port + "/pkeys", Kind::kDir, ""});
  v.push_back({port + "/pkeys/0", Kind::kFile, Hex(L::kDefaultPkey, 4)});

  // Every index has a gids/N (an empty one reads as zeros); gid_attrs exist for valid entries
  // only (the kernel refuses to read the others).
  const core::GidTable gids = core::GidTable::Read();
  v.push_back({port + "/gids", Kind::kDir, ""});
  for (uint32_t i = 0; i < L::kGidTableLen; ++i)
    v.push_back({port + "/gids/" + std::to_string(i), Kind::kFile, Groups(gids.at(i).gid.data(), 16)});
  v.push_back({port + "/gid_attrs", Kind::kDir, ""});
  v.push_back({port + "/gid_attrs/types", Kind::kDir, ""});
  v.push_back({port + "/gid_attrs/ndevs", Kind::kDir, ""});
  for (uint32_t i = 0; i < L::kGidTableLen; ++i) {
    const core::GidEntry& e = gids.at(i);
    if (!e.valid) continue;
    const char* type = e.type == core::GidType::kRoceV2 ? "RoCE v2\n" : "IB/RoCE v1\n";
    v.push_back({port + "/gid_attrs/types/" + std::to_string(i), Kind::kFile, type});
    char name[IF_NAMESIZE];
    if (e.ifindex != 0 && if_indextoname(e.ifindex, name) != nullptr)
      v.push_back({port + "/gid_attrs/ndevs/" + std::to_string(i), Kind::kFile, std::string(name) + "\n"});
  }
}

// device/net/<ifname> names the netdevs the port's GIDs come from (pyverbs and rdma-core's
// tests find a device's IP addresses this way); each links to the netdev's own sysfs node.
void AddDevice(std::vector<ViewEntry>& v, const std::string& dev) {
  v.push_back({dev, Kind::kDir, ""});
  v.push_back({dev + "/numa_node", Kind::kFile, "-1\n"});  // not attached to a NUMA node
  v.push_back({dev + "/net", Kind::kDir, ""});
  const core::GidTable gids = core::GidTable::Read();
  std::vector<std::string> seen;
  for (uint32_t i = 0; i < L::kGidTableLen; ++i) {
    char name[IF_NAMESIZE];
    const core::GidEntry& e = gids.at(i);
    if (!e.valid || e.ifindex == 0 || if_indextoname(e.ifindex, name) == nullptr) continue;
    bool dup = false;
    for (const std::string& s : seen) dup |= s == name;
    if (dup) continue;
    seen.push_back(name);
    v.push_back({dev + "/net/" + name, Kind::kSymlink, std::string("/sys/class/net/") + name});
  }
}

int RemoveOne(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

// Removes `root` and everything below it, not following symlinks.
void RemoveTree(const std::string& root) {
  nftw(root.c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
}

// Views differ per network namespace and address set, so each new one removes those nobody has
// rendered or reused for a day (a run that reuses a view touches it).
void PruneViews(const std::string& base, const std::string& keep) {
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return;
  const time_t old = time(nullptr) - 24 * 3600;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = base + "/" + e->d_name;
    struct stat st {};
    if (path != keep && lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_mtime < old)
      RemoveTree(path);
  }
  closedir(d);
}

Status Fail(const std::string& what, const std::string& path) {
  int e = errno;
  return Status(e, what + " " + path + ": " + strerror(e));
}

}  // namespace

std::vector<ViewEntry> RenderView() {
  const core::DeviceIdentity& id = core::Identity();
  std::vector<ViewEntry> v;
  const std::string cls = "sys/class/infiniband";
  const std::string ib = cls + "/" + id.name;
  for (const char* d : {"sys", "sys/class", "sys/class/infiniband"}) v.push_back({d, Kind::kDir, ""});
  v.push_back({ib, Kind::kDir, ""});
  v.push_back({ib + "/node_guid", Kind::kFile, Groups(id.node_guid.data(), 8)});
  v.push_back({ib + "/sys_image_guid", Kind::kFile, Groups(id.node_guid.data(), 8)});
  v.push_back({ib + "/node_type", Kind::kFile, "1: CA\n"});
  v.push_back({ib + "/node_desc", Kind::kFile, id.name + "\n"});
  v.push_back({ib + "/fw_ver", Kind::kFile, id.fw_ver + "\n"});
  v.push_back({ib + "/hw_rev", Kind::kFile, Hex(id.hw_ver, 1)});
  v.push_back({ib + "/ports", Kind::kDir, ""});
  AddPort(v, ib + "/ports/1");
  AddDevice(v, ib + "/device");

  // The uverbs node libibverbs would open (ibv_device.dev_name / dev_path), ABI version 6
  // (IB_USER_VERBS_ABI_VERSION), char device 231:192 as the kernel numbers uverbs0.
  const std::string uv = "sys/class/infiniband_verbs";
  v.push_back({uv, Kind::kDir, ""});
  v.push_back({uv + "/abi_version", Kind::kFile, "6\n"});
  v.push_back({uv + "/uverbs0", Kind::kDir, ""});
  v.push_back({uv + "/uverbs0/ibdev", Kind::kFile, id.name + "\n"});
  v.push_back({uv + "/uverbs0/abi_version", Kind::kFile, "6\n"});
  v.push_back({uv + "/uverbs0/dev", Kind::kFile, "231:192\n"});

  // Stacks check that the device node is a character device they may open read-write (UCX:
  // uct_ib_device_is_accessible) but never issue an ioctl on it through our libraries: /dev/null
  // is exactly such a node.
  v.push_back({"dev", Kind::kDir, ""});
  v.push_back({"dev/infiniband", Kind::kDir, ""});
  v.push_back({"dev/infiniband/uverbs0", Kind::kSymlink, "/dev/null"});
  v.push_back({"dev/infiniband/rdma_cm", Kind::kSymlink, "/dev/null"});
  return v;
}

Status WriteView(const std::vector<ViewEntry>& entries, const std::string& root) {
  if (mkdir(root.c_str(), 0700) != 0) return Fail("cannot create", root);
  for (const ViewEntry& e : entries) {
    const std::string path = root + "/" + e.path;
    if (e.kind == Kind::kDir) {
      if (mkdir(path.c_str(), 0755) != 0) return Fail("cannot create", path);
    } else if (e.kind == Kind::kSymlink) {
      if (symlink(e.content.c_str(), path.c_str()) != 0) return Fail("cannot link", path);
    } else {
      int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
      if (fd < 0) return Fail("cannot create", path);
      ssize_t n = write(fd, e.content.data(), e.content.size());
      close(fd);
      if (n != static_cast<ssize_t>(e.content.size())) return Fail("cannot write", path);
    }
  }
  return Status::Ok();
}

Result<std::string> PrepareView() {
  const char* runtime = getenv("XDG_RUNTIME_DIR");
  std::string base = (runtime && *runtime == '/' ? runtime : "/tmp");
  base += "/softverbs-view-" + std::to_string(getuid());
  // The per-user directory must be ours and private: the view decides what programs trust.
  if (mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) return Fail("cannot create", base);
  struct stat st {};
  if (lstat(base.c_str(), &st) != 0) return Fail("cannot stat", base);
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0)
    return Status(EPERM, base + " is not a private directory of this user");

  const std::vector<ViewEntry> entries = RenderView();
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over paths, kinds and contents
  for (const ViewEntry& e : entries)
    for (const std::string& s : {e.path, std::to_string(static_cast<int>(e.kind)), e.content})
      for (unsigned char c : s + '\0') h = (h ^ c) * 0x100000001b3ull;
  char name[32];
  snprintf(name, sizeof(name), "/%016llx", static_cast<unsigned long long>(h));
  const std::string dir = base + name;
  if (access((dir + "/dev/infiniband").c_str(), F_OK) == 0) {  // complete and current
    utimes(dir.c_str(), nullptr);  // in use: keep it from PruneViews
    return dir;
  }

  // Render beside it and rename into place: a reader never sees a half-written view.
  const std::string tmp = dir + ".tmp" + std::to_string(getpid());
  Status s = WriteView(entries, tmp);
  // ENOTEMPTY / EEXIST: a concurrent run rendered the same view first.
  if (s.ok() && rename(tmp.c_str(), dir.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST)
    s = Fail("cannot rename into", dir);
  RemoveTree(tmp);  // nothing left after a successful rename
  if (!s.ok()) return s;
  PruneViews(base, dir);
  return dir;
}

}  // namespace softverbs::cli
