/* Byte order: bpf_ntohs/bpf_ntohl/bpf_htons/bpf_htonl and __builtin_bswap64 (BPF_END to big
 * endian, a no-op pair on a big-endian machine), on packet fields read and written: the
 * program turns the frame around like a reflector (swaps MAC addresses, and IPv4 addresses and
 * UDP/TCP ports when present) and records bytes 6..14 byte-reversed. The frame out is compared
 * with rdx's.
 * Input dependence: all header bytes; results[0..4]. */
#include "common.h"

RESULTS_MAP(4);

SEC("xdp")
int byteswap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;

	__u8 tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);

	__u64 raw;
	__builtin_memcpy(&raw, data + 6, 8);
	record(0, __builtin_bswap64(raw));
	record(1, bpf_ntohs(eth->h_proto));

	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return bpf_ntohs(eth->h_proto);
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return 1;
	__u32 s = bpf_ntohl(ip->saddr), d = bpf_ntohl(ip->daddr);
	ip->saddr = bpf_htonl(d);
	ip->daddr = bpf_htonl(s);
	record(2, ((__u64)s << 32) | d);
	if (ip->ihl != 5 || (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return 2;
	__be16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return 3;
	__u16 sp = bpf_ntohs(ports[0]), dp = bpf_ntohs(ports[1]);
	ports[0] = bpf_htons(dp);
	ports[1] = bpf_htons(sp);
	record(3, ((__u64)sp << 16) | dp);
	return ((__u32)sp << 16) | dp;
}

char LICENSE[] SEC("license") = "GPL";
