// expect: accept
// A socket filter keeping short packets of one protocol, with a running total in cb[0].
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("socket")
int short_packets(struct __sk_buff *skb)
{
	skb->cb[0] = skb->len;
	if (skb->protocol != __builtin_bswap16(0x0800))
		return 0;
	return skb->len < 128 ? skb->len : 0;
}

char LICENSE[] SEC("license") = "GPL";
