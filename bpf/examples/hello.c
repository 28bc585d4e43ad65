// The README demo: a socket-filter-shaped program that counts packets in a map and returns
// a verdict computed from the first bytes of the packet.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} packets SEC(".maps");

SEC("socket")
int hello(struct __sk_buff *skb)
{
	__u32 key = 0;
	__u64 *count = bpf_map_lookup_elem(&packets, &key);
	if (count)
		__sync_fetch_and_add(count, 1);
	return skb->len > 64 ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
