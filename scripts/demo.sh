#!/usr/bin/env bash
# The main job end to end, on the embedded defaults. For now: compile an eBPF C program with
# clang, look inside the object with `rdx inspect`, and run it in rdx's reference interpreter
# on sample packets with `rdx run`. (Later: verify, JIT, deploy into a running process.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

bold=$'\033[1m'
plain=$'\033[0m'
[ -t 1 ] || { bold=''; plain=''; }
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
show() { printf '$ %s\n' "$*"; "$@"; }

step "build the rdx command line (release)"
show cargo build --release --quiet -p rdx-cli --bin rdx
rdx="${CARGO_TARGET_DIR:-target}/release/rdx"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

step "compile bpf/examples/hello.c with clang"
show clang -O2 -g -target bpf -Wall -I"/usr/include/$(uname -m)-linux-gnu" \
  -c bpf/examples/hello.c -o "$work/hello.o"

step "what the object holds: programs, maps, relocations, code"
show "$rdx" inspect "$work/hello.o"

step "sample packets"
# A 98-byte ICMP echo request (Ethernet + IPv4 + ICMP with 56 bytes of payload) and a
# 60-byte minimum-size ARP frame.
{
  printf '\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x01\x08\x00'      # Ethernet, IPv4
  printf '\x45\x00\x00\x54\x00\x00\x40\x00\x40\x01\x00\x00'              # IPv4: 84 bytes, ICMP
  printf '\x7f\x00\x00\x01\x7f\x00\x00\x01'                              # 127.0.0.1 -> 127.0.0.1
  printf '\x08\x00\x00\x00\x00\x01\x00\x01'                              # ICMP echo request
  head -c 56 /dev/zero
} >"$work/ping.bin"
{
  printf '\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01\x08\x06'      # Ethernet, ARP
  head -c 46 /dev/zero
} >"$work/arp.bin"
printf 'ping.bin: %s bytes, arp.bin: %s bytes\n' "$(wc -c <"$work/ping.bin")" "$(wc -c <"$work/arp.bin")"

step "run it: hello returns 1 for packets longer than 64 bytes (past the Ethernet header)"
show "$rdx" run "$work/hello.o" --prog hello --packet "$work/ping.bin"
show "$rdx" run "$work/hello.o" --prog hello --packet "$work/arp.bin"

step "run it 100000 times: the packet counter in its map follows"
show "$rdx" run "$work/hello.o" --prog hello --packet "$work/ping.bin" --repeat 100000

step "the same run as JSON, for scripts"
show "$rdx" run "$work/hello.o" --prog hello --packet "$work/ping.bin" --json

printf '\n%sdemo: ok%s\n' "$bold" "$plain"
