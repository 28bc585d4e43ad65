// Maps declared the pre-BTF way: `struct bpf_map_def` in the `maps` section, as objects
// written for older libbpf and iproute2 still do.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "rdx_legacy_maps.h"

struct bpf_map_def SEC("maps") counters = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 8,
};

struct bpf_map_def SEC("maps") flows = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(__u64),
	.value_size = sizeof(__u32),
	.max_entries = 1024,
	.map_flags = 1, /* BPF_F_NO_PREALLOC */
};

SEC("socket")
int count_len(struct __sk_buff *skb)
{
	__u32 key = skb->len & 7;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	__u64 flow = skb->hash;
	__u32 one = 1;
	bpf_map_update_elem(&flows, &flow, &one, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
