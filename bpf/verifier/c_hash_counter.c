// expect: accept
// Counts packets per length in a hash map: lookup, then insert on a miss.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} by_len SEC(".maps");

SEC("socket")
int count_len(struct __sk_buff *skb)
{
	__u32 key = skb->len;
	__u64 one = 1;
	__u64 *v = bpf_map_lookup_elem(&by_len, &key);
	if (v)
		*v += 1;
	else
		bpf_map_update_elem(&by_len, &key, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
