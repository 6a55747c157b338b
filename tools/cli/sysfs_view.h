// The device view: the files real RDMA stacks read or stat before they use a device
// (/sys/class/infiniband/<dev>/..., /sys/class/infiniband_verbs/uverbs0/..., /dev/infiniband/...),
// rendered from core's identity and GID table so they say what libibverbs says
// (docs/ecosystem.md#the-device-view). `softverbs run` shows them to a program through
// libsoftverbs-view.so (tools/view/preload.c).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace softverbs::cli {

struct ViewEntry {
  enum class Kind { kDir, kFile, kSymlink };
  std::string path;  // relative to the view's root, e.g. "sys/class/infiniband/softverbs0/node_guid"
  Kind kind = Kind::kFile;
  std::string content;  // a file's bytes or a symlink's target
};

// Every entry of the view, parents before children.
std::vector<ViewEntry> RenderView();

// Writes `entries` under `root` (which must not exist yet).
Status WriteView(const std::vector<ViewEntry>& entries, const std::string& root);

// The directory holding the current view for this user, rendering it if its content is new:
// ${XDG_RUNTIME_DIR:-/tmp}/softverbs-view-<uid>/<hash of the content>. Reused while the content
// (GIDs, identity) is unchanged, so runs leave nothing behind per run; views unused for a day
// are removed when a new one is rendered.
Result<std::string> PrepareView();

}  // namespace softverbs::cli
