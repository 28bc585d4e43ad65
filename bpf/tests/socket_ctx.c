/* Socket filter context: reads the __sk_buff fields BPF_PROG_TEST_RUN defines (len after the
 * Ethernet header is pulled, protocol from eth_type_trans, pkt_type from the destination MAC,
 * ifindex and ingress_ifindex, and mark, priority and cb[0..5] from ctx_in), writes cb[] (the
 * only fields a socket filter may write; compared in ctx_out) and returns a length-like
 * verdict.
 * Input dependence: frame length, EtherType, destination MAC class, and the mark, priority
 * and cb values given in ctx_in; results[0..5]. */
#include "common.h"

RESULTS_MAP(5);

SEC("socket")
int socket_ctx(struct __sk_buff *skb)
{
	__u32 len = skb->len;
	__u32 proto = skb->protocol;
	__u32 type = skb->pkt_type;
	__u32 mark = skb->mark;
	__u32 prio = skb->priority;
	__u32 cbsum = 0;

#pragma unroll
	for (int i = 0; i < 5; i++)
		cbsum = cbsum * 31 + skb->cb[i];

	skb->cb[0] = len ^ mark;
	skb->cb[1] = bpf_ntohs(proto);
	skb->cb[2] = cbsum;
	skb->cb[3] = prio + type;
	skb->cb[4] = skb->cb[4] << 1;

	record(0, ((__u64)len << 32) | bpf_ntohs(proto));
	record(1, type);
	record(2, ((__u64)mark << 32) | prio);
	record(3, cbsum);
	record(4, ((__u64)skb->ifindex << 32) | skb->ingress_ifindex);
	return len > (mark & 0xff) ? len - (mark & 0xff) : 0;
}

char LICENSE[] SEC("license") = "GPL";
