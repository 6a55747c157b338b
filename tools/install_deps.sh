#!/usr/bin/env bash
# Installs what softverbs builds and tests with, from Debian's packages (Debian 12).
# rdma-core's headers are the ABI definition; the clients are the real programs the tests drive.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# --no-update: the caller has just run apt-get update (.ci/run does).
[ "${1:-}" = "--no-update" ] || $SUDO apt-get update -q
# libssl-dev: OpenSSL libcrypto, AES-GCM of ESP flow actions (transport/raw/esp.cc).
# tshark: tests/unit/fabric/packet and the netns test (captures must dissect as RRoCE); ethtool:
# the netns test turns UDP segmentation off on its veth to capture GSO segments as a wire carries them.
# qemu-system-x86, linux-image-amd64, busybox-static: tests/interop boots Debian's kernel (its
# rdma_rxe) under qemu as a real rxe peer; its user space is the rdma-core packages listed here
# (ibverbs-providers holds the rxe provider); xz-utils unpacks the kernel image.
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake pkg-config binutils libssl-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  libibverbs-dev librdmacm-dev rdma-core \
  ibverbs-utils perftest qperf rdmacm-utils python3 python3-pyverbs \
  iproute2 procps \
  ucx-utils libucx0 libucx-dev libfabric-bin openmpi-bin libopenmpi-dev \
  tshark ethtool \
  ibverbs-providers qemu-system-x86 linux-image-amd64 busybox-static xz-utils
