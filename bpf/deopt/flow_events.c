/* Deoptimisation workload: an XDP program that updates maps and emits ring-buffer events
 * before most of its branches, with a BPF-to-BPF call whose frame holds a pointer into the
 * caller's stack. The exactly-once test guards every branch of it; the benchmark follows
 * its profile (IPv4/UDP to port 53 is the hot path). Maps: stats, flows, events. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct flow_key {
	__u32 saddr;
	__u16 dport;
	__u16 proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct flow_key);
	__type(value, __u64);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

struct event {
	__u32 kind;
	__u32 len;
	__u64 value;
};

static __always_inline void bump(__u32 slot, __u64 by)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &slot);
	if (v)
		__sync_fetch_and_add(v, by);
}

static __always_inline void emit(__u32 kind, __u32 len, __u64 value)
{
	struct event e = { .kind = kind, .len = len, .value = value };
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
}

/* A real call frame: `key` points into the caller's stack. Counts the flow, emits an event,
 * then branches on what it counted. */
static __attribute__((noinline)) int account(struct flow_key *key, __u32 len)
{
	__u64 one = 1;
	__u64 *n = bpf_map_lookup_elem(&flows, key);
	if (!n) {
		bpf_map_update_elem(&flows, key, &one, BPF_ANY);
		emit(10, len, key->saddr);
		return 1;
	}
	*n += 1;
	emit(11, len, *n);
	if (*n % 4 == 0) {
		bump(6, 1);
		return 2;
	}
	if (key->dport == 53)
		return 3;
	return 4;
}

SEC("xdp")
int flow_events(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	bump(0, 1);
	if (data + sizeof(struct ethhdr) > end) {
		emit(1, len, 0);
		return XDP_DROP;
	}
	struct ethhdr *eth = data;
	bump(1, len);
	if (eth->h_proto != bpf_htons(ETH_P_IP)) {
		emit(2, len, eth->h_proto);
		return XDP_PASS;
	}
	struct iphdr *ip = data + sizeof(*eth);
	if ((void *)(ip + 1) > end) {
		emit(3, len, 0);
		return XDP_DROP;
	}
	bump(2, ip->ttl);
	if (ip->protocol != IPPROTO_UDP) {
		emit(4, len, ip->protocol);
		bump(3, 1);
		return XDP_PASS;
	}
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end) {
		emit(5, len, 0);
		return XDP_DROP;
	}
	struct flow_key key = {
		.saddr = ip->saddr & bpf_htonl(0xff),
		.dport = bpf_ntohs(udp->dest),
		.proto = ip->protocol,
	};
	bump(4, key.dport);
	int verdict = account(&key, len);
	bump(5, verdict);
	if (verdict == 1 && key.dport != 53) {
		emit(12, len, key.dport);
		return XDP_TX;
	}
	return verdict >= 3 ? XDP_PASS : XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
