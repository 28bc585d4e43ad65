/* Reading a map value through a pointer obtained before the element was deleted, in the same
 * run. The kernel verifier accepts it, and the kernel keeps the memory valid for the rest of
 * the run (a preallocated hash element goes back to the free list without being cleared; an
 * LPM trie node is freed after an RCU grace period), so the program reads the old value.
 * Input dependence: the key is byte 14 & 7 for the hash map and bytes 26..30 for the trie;
 * the stored values come from the frame length and bytes 0..8. Maps: table, trie, results. */
#include "common.h"

RESULTS_MAP(4);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} table SEC(".maps");

struct lpm_key {
	__u32 prefixlen;
	__u32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} trie SEC(".maps");

SEC("xdp")
int map_value_after_delete(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	if ((void *)(data + 30) > end)
		return 0;
	__u64 stamp;
	__builtin_memcpy(&stamp, data, 8);
	stamp ^= len;

	__u32 k = data[14] & 7;
	bpf_map_update_elem(&table, &k, &stamp, BPF_ANY);
	__u64 *v = bpf_map_lookup_elem(&table, &k);
	if (!v)
		return 1;
	record(0, (__u64)bpf_map_delete_elem(&table, &k));
	record(1, *v);

	struct lpm_key key = { .prefixlen = 32 };
	__builtin_memcpy(&key.addr, data + 26, 4);
	bpf_map_update_elem(&trie, &key, &stamp, BPF_ANY);
	__u64 *t = bpf_map_lookup_elem(&trie, &key);
	if (!t)
		return 2;
	record(2, (__u64)bpf_map_delete_elem(&trie, &key));
	record(3, *t);
	return (__u32)(*v ^ *t);
}

char LICENSE[] SEC("license") = "GPL";
