// expect: reject null-deref
// Uses a lookup result without checking it for null.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("socket")
int unchecked(struct __sk_buff *skb)
{
	__u32 key = skb->len;
	__u64 *v = bpf_map_lookup_elem(&counts, &key);
	return *v;
}

char LICENSE[] SEC("license") = "GPL";
