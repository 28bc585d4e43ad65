/* A small layer-4 load balancer, the kind of program rdx exists to deploy: parses
 * Ethernet/IPv4/UDP-or-TCP, keeps a connection table (hash map, 5-tuple key) so a flow sticks
 * to its backend, picks new flows' backends by a flow hash over a .rodata backend table,
 * rewrites the destination MAC and IPv4 address, fixes the IPv4 header checksum
 * incrementally (RFC 1624) and counts packets and bytes per backend with atomic adds.
 * Returns XDP_TX for balanced packets, XDP_PASS for everything else, XDP_DROP for truncated
 * IPv4.
 * Input dependence: the 5-tuple picks the backend (and repeats hit the connection table);
 * the frame out carries the rewrite; maps: conntrack (32 flows, -E2BIG when full: the packet
 * is then balanced without pinning), backend_stats, results. */
#include "common.h"

RESULTS_MAP(4);

struct flow {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct backend {
	__u8 mac[ETH_ALEN];
	__u16 pad;
	__u32 addr; /* network order */
};

struct stats {
	__u64 packets;
	__u64 bytes;
};

const struct backend backends[4] = {
	{ { 0x02, 0xbe, 0, 0, 0, 1 }, 0, 0x0a01000a }, /* bytes 10.0.1.10 in network order */
	{ { 0x02, 0xbe, 0, 0, 0, 2 }, 0, 0x0b01000a },
	{ { 0x02, 0xbe, 0, 0, 0, 3 }, 0, 0x0c01000a },
	{ { 0x02, 0xbe, 0, 0, 0, 4 }, 0, 0x0d01000a },
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32);
	__type(key, struct flow);
	__type(value, __u32);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct stats);
} backend_stats SEC(".maps");

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* RFC 1624: HC' = ~(~HC + ~m + m') for a 32-bit field, in 16-bit halves. */
static __always_inline __u16 csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;
	sum += (__u16)~(from & 0xffff) + (__u16)~(from >> 16);
	sum += (to & 0xffff) + (to >> 16);
	return ~csum_fold32(sum);
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return XDP_DROP;
	if (ip->ihl != 5 || (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return XDP_PASS;
	__be16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return XDP_DROP;

	struct flow key = {
		.saddr = ip->saddr,
		.daddr = ip->daddr,
		.sport = ports[0],
		.dport = ports[1],
		.proto = ip->protocol,
	};
	__u32 idx;
	__u32 *pinned = bpf_map_lookup_elem(&conntrack, &key);
	if (pinned) {
		idx = *pinned & 3;
		record(0, 1);
	} else {
		__u32 h = key.saddr * 0x9e3779b1 ^ key.daddr ^ ((__u32)key.sport << 16 | key.dport);
		h ^= h >> 15;
		h *= 0x85ebca6b;
		h ^= h >> 13;
		idx = h & 3;
		long ret = bpf_map_update_elem(&conntrack, &key, &idx, BPF_NOEXIST);
		record(0, (__u64)ret);
	}

	/* Re-check the index where it is used: clang merges the two paths above in a way the
	 * verifier cannot bound otherwise. */
	if (idx > 3)
		return XDP_ABORTED;
	const struct backend *be = &backends[idx];
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, be->mac, ETH_ALEN);
	__u32 old = ip->daddr;
	ip->daddr = be->addr;
	ip->check = csum_replace4(ip->check, old, be->addr);
	record(1, idx);
	record(2, ip->check);

	struct stats *st = bpf_map_lookup_elem(&backend_stats, &idx);
	if (st) {
		__sync_fetch_and_add(&st->packets, 1);
		__sync_fetch_and_add(&st->bytes, (long)end - (long)data);
	}
	record(3, bpf_ntohl(be->addr));
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
