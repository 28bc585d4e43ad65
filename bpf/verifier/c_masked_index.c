// expect: accept
// A variable index into a map value, bounded by a mask.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct table {
	__u8 slots[64];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct table);
} tables SEC(".maps");

SEC("socket")
int lookup_slot(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct table *t = bpf_map_lookup_elem(&tables, &zero);
	if (!t)
		return 0;
	return t->slots[skb->hash & 63];
}

char LICENSE[] SEC("license") = "GPL";
