/* Packet parsing: Ethernet, up to two VLAN tags (802.1Q 0x8100 and 802.1ad 0x88a8), IPv4 with
 * options (IHL), then UDP or TCP ports, every header behind a bounds check. Counts packets per
 * outcome in an array map and returns a code that encodes the outcome and the destination port.
 * Input dependence: the headers of the frame; truncated frames stop at the first header that
 * does not fit (outcomes 1..4). Maps: outcomes, results (vlan ids, addresses, ports). */
#include "common.h"

RESULTS_MAP(6);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} outcomes SEC(".maps");

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

enum outcome { OK_UDP, SHORT_ETH, SHORT_VLAN, NOT_IPV4, BAD_IPV4, OK_TCP, OTHER_L4, SHORT_L4 };

static __always_inline int count(__u32 outcome, __u32 port)
{
	__u64 *c = bpf_map_lookup_elem(&outcomes, &outcome);
	if (c)
		*c += 1;
	return (outcome << 16) | port;
}

SEC("xdp")
int pkt_ipv4(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(SHORT_ETH, 0);
	__u16 proto = eth->h_proto;
	void *cursor = eth + 1;
	__u32 vlans = 0;

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = cursor;
		if ((void *)(vh + 1) > end)
			return count(SHORT_VLAN, 0);
		vlans = (vlans << 12) | (bpf_ntohs(vh->tci) & 0xfff);
		proto = vh->proto;
		cursor = vh + 1;
	}
	record(0, vlans);
	if (proto != bpf_htons(ETH_P_IP))
		return count(NOT_IPV4, bpf_ntohs(proto));

	struct iphdr *ip = cursor;
	if ((void *)(ip + 1) > end)
		return count(BAD_IPV4, 0);
	__u32 ihl = ip->ihl * 4;
	if (ip->version != 4 || ihl < sizeof(*ip))
		return count(BAD_IPV4, ip->version);
	record(1, bpf_ntohl(ip->saddr));
	record(2, bpf_ntohl(ip->daddr));
	record(3, bpf_ntohs(ip->tot_len));
	void *l4 = (void *)ip + ihl;

	if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = l4;
		if ((void *)(udp + 1) > end)
			return count(SHORT_L4, ihl);
		record(4, bpf_ntohs(udp->source));
		return count(OK_UDP, bpf_ntohs(udp->dest));
	}
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;
		if ((void *)(tcp + 1) > end)
			return count(SHORT_L4, ihl);
		record(4, bpf_ntohs(tcp->source));
		record(5, ((__u64)tcp->syn << 1) | tcp->ack | ((__u64)tcp->doff << 8));
		return count(OK_TCP, bpf_ntohs(tcp->dest));
	}
	return count(OTHER_L4, ip->protocol);
}

char LICENSE[] SEC("license") = "GPL";
