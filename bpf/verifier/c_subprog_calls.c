// expect: accept
// BPF-to-BPF calls: non-inlined functions taking a stack pointer and scalars.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __attribute__((noinline)) __u64 mix(__u64 a, __u64 b)
{
	return (a * 31) ^ (b >> 3);
}

static __attribute__((noinline)) void fill(__u64 *out, __u32 n)
{
	out[0] = mix(n, 7);
	out[1] = mix(out[0], n);
}

SEC("socket")
int calls(struct __sk_buff *skb)
{
	__u64 buf[2];
	fill(buf, skb->len);
	return (buf[0] + buf[1]) & 0xff;
}

char LICENSE[] SEC("license") = "GPL";
