/* IPv6 parsing: Ethernet, IPv6, a bounded walk over up to four extension headers (hop-by-hop,
 * routing, destination options: length in 8-byte units), then UDP/TCP/ICMPv6. Flows are
 * counted in a hash map keyed by a fold of both addresses and the final next-header value.
 * Input dependence: the frame's headers; the return value is (next header << 8) | number of
 * extension headers, or an error code for truncated/non-IPv6 frames. Maps: flows6, results. */
#include "common.h"

RESULTS_MAP(4);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} flows6 SEC(".maps");

struct ext_hdr {
	__u8 next;
	__u8 len;
};

SEC("xdp")
int pkt_ipv6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 1;
	if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 2;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > end)
		return 3;

	__u64 key = 0;
	__u32 *words = (__u32 *)&ip6->saddr;
#pragma unroll
	for (int i = 0; i < 8; i++)
		key = (key << 5) ^ (key >> 59) ^ words[i];
	__u8 next = ip6->nexthdr;
	void *cursor = ip6 + 1;
	__u32 exts = 0;

#pragma clang loop unroll(disable)
	for (int i = 0; i < 4; i++) {
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS)
			break;
		struct ext_hdr *eh = cursor;
		if ((void *)(eh + 1) > end)
			return 4;
		next = eh->next;
		cursor += (eh->len + 1) * 8;
		exts++;
	}
	key ^= (__u64)next << 56;

	__u64 one = 1;
	__u64 *count = bpf_map_lookup_elem(&flows6, &key);
	if (count)
		*count += 1;
	else
		record(3, (__u64)bpf_map_update_elem(&flows6, &key, &one, BPF_NOEXIST));

	__u32 ports = 0;
	if (next == IPPROTO_UDP || next == IPPROTO_TCP) {
		__be16 *p = cursor;
		if ((void *)(p + 2) > end)
			return 5;
		ports = ((__u32)bpf_ntohs(p[0]) << 16) | bpf_ntohs(p[1]);
	} else if (next == IPPROTO_ICMPV6) {
		__u8 *t = cursor;
		if ((void *)(t + 1) > end)
			return 5;
		ports = *t;
	}
	record(0, key);
	record(1, ports);
	record(2, bpf_ntohs(ip6->payload_len));
	return ((__u32)next << 8) | exts;
}

char LICENSE[] SEC("license") = "GPL";
