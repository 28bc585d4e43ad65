// expect: accept
// A variable index into an initialised stack array, bounded by a mask: clang computes the
// address from the frame pointer plus the scaled index and reads it with one load.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("socket")
int stack_array_index(struct __sk_buff *skb)
{
	volatile __u64 buf[8] = {};
	buf[1] = skb->len;
	buf[5] = skb->protocol;
	return buf[skb->hash & 7];
}

char LICENSE[] SEC("license") = "GPL";
