#!/usr/bin/env bash
# Installs what building, testing and the demo need on a fresh Debian machine (run as root):
# clang/llvm for eBPF objects, libbpf headers, bpftool, cross toolchains and qemu for the
# aarch64 JIT tests, and Rust through rustup if it is missing.
set -euo pipefail

APT_PACKAGES=(
  clang llvm libbpf-dev bpftool linux-libc-dev
  qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  strace pkg-config make gcc libelf-dev zlib1g-dev python3-scapy libfabric-dev iproute2
  stress-ng libclang-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: cargo not found; install Rust with rustup first" >&2
    exit 1
  fi
fi
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt >/dev/null 2>&1 || true

# The bpf filesystem is where kernel comparisons pin nothing, but bpftool expects it mounted.
if [ -d /sys/fs/bpf ] && ! mount | grep -q ' /sys/fs/bpf '; then
  mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
fi
echo "setup: ok ($(clang --version | head -1); $(cargo --version))"
