#!/usr/bin/env bash
# The main job end to end, on the embedded defaults: compile eBPF C programs with clang, look
# inside an object and run it in rdx's reference interpreter, then the agentless path: start a
# host process that links the rdx runtime, and from a separate control-plane process verify,
# compile, link and write extensions into the host's memory (shared-memory transport), publish
# them with one atomic swap, read the host's counters and maps remotely, and roll back.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

bold=$'\033[1m'
plain=$'\033[0m'
[ -t 1 ] || { bold=''; plain=''; }
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$plain"; }
show() { printf '$ %s\n' "$*"; "$@"; }

step "build the rdx command line and an example host (release)"
show cargo build --release --quiet -p rdx-cli --bin rdx -p rdx-test-hosts --bin rdx-test-host
target="${CARGO_TARGET_DIR:-target}/release"
rdx="$target/rdx"

work="$(mktemp -d)"
host_pid=""
cleanup() {
  [ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null || true
  rm -rf "$work" "/dev/shm/rdx-demo-$$"
}
trap cleanup EXIT
# The control plane keeps its registry (artifacts, nodes, history) here for this demo only.
export RDX_STATE_DIR="$work/state"

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

step "the agentless path: start a host process that links the rdx runtime"
# rdx-test-host control exposes one hook, on_request, whose context is { u64 value; u64 out; }, and
# answers "run V" on stdin with what the hook returned. It never loads or compiles anything.
mkfifo "$work/host.in"
"$target/rdx-test-host" control --path "/dev/shm/rdx-demo-$$" <"$work/host.in" >"$work/host.out" &
host_pid=$!
exec 3>"$work/host.in"
for _ in $(seq 50); do grep -q ready "$work/host.out" && break; sleep 0.1; done
cat "$work/host.out"
ask() { # send one request to the host and print its answer
  local before; before=$(wc -l <"$work/host.out")
  echo "run $1" >&3
  for _ in $(seq 50); do [ "$(wc -l <"$work/host.out")" -gt "$before" ] && break; sleep 0.05; done
  printf 'host: run %s -> %s\n' "$1" "$(tail -n 1 "$work/host.out")"
}
ask 5

step "compile two versions of an extension, and one that reads out of bounds, with clang"
for v in plus_one times_two out_of_bounds; do
  show clang -O2 -g -target bpf -Wall -I"/usr/include/$(uname -m)-linux-gnu" \
    -c "bpf/control/$v.c" -o "$work/$v.o"
done

step "register the node with the control plane (reads its header, EIM spec, context table)"
show "$rdx" node add demo "shm:/dev/shm/rdx-demo-$$"

step "deploy plus_one: verify, compile, link, write into the host, publish with one CAS"
show "$rdx" deploy "$work/plus_one.o" --node demo --hook on_request
ask 5

step "upgrade to times_two: the host's behaviour changes with no work on its side"
show "$rdx" deploy "$work/times_two.o" --node demo --hook on_request
ask 5

step "a program the verifier rejects never reaches the node"
show "$rdx" deploy "$work/out_of_bounds.o" --node demo --hook on_request || true
ask 5

step "read the host's hooks, counters and maps remotely (no host CPU involved)"
show "$rdx" node show demo
show "$rdx" map dump --node demo hits

step "roll back to the previous version"
show "$rdx" rollback --node demo --hook on_request
ask 5
show "$rdx" history --node demo

echo quit >&3
exec 3>&-
wait "$host_pid" 2>/dev/null || true
host_pid=""

printf '\n%sdemo: ok%s\n' "$bold" "$plain"
