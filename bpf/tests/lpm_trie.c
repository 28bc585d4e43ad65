/* Longest-prefix-match trie (BPF_MAP_TYPE_LPM_TRIE): the program inserts a prefix taken from
 * the packet (prefix length up to 39, so lengths over 32 must fail with -EINVAL; the address
 * bits past the prefix are cleared first), looks up the longest match of another address,
 * and sometimes deletes the prefix again (-ENOENT when absent). The trie holds 16 prefixes,
 * so random inputs fill it (-ENOSPC).
 * Input dependence: prefix = bytes 26..30, length = byte 14 % 40, lookup address = bytes
 * 30..34 (bytes 0..4 and 4..8 on frames shorter than 34), delete when byte 15 % 8 == 0.
 * Maps: prefixes, results. */
#include "common.h"

RESULTS_MAP(4);

struct lpm_key {
	__u32 prefixlen;
	__u32 addr; /* network byte order, most significant bit first */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u64);
} prefixes SEC(".maps");

SEC("xdp")
int lpm_trie(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	if ((void *)(data + 16) > end)
		return 0;
	__u32 plen = data[14] % 40;
	__u32 del = data[15] % 8 == 0;
	__u32 addr, probe;
	if ((void *)(data + 34) <= end) {
		__builtin_memcpy(&addr, data + 26, 4);
		__builtin_memcpy(&probe, data + 30, 4);
	} else {
		__builtin_memcpy(&addr, data, 4);
		__builtin_memcpy(&probe, data + 4, 4);
	}
	if (plen == 0)
		addr = 0;
	else if (plen < 32)
		addr &= bpf_htonl(~0U << (32 - plen));

	struct lpm_key key = { .prefixlen = plen, .addr = addr };
	__u64 value = ((__u64)plen << 32) | len;
	long ret = bpf_map_update_elem(&prefixes, &key, &value, BPF_ANY);
	record(0, (__u64)ret);

	struct lpm_key want = { .prefixlen = 32, .addr = probe };
	__u64 *hit = bpf_map_lookup_elem(&prefixes, &want);
	__u64 found = hit ? *hit : 0xffffffffffffffffULL;
	record(1, found);

	/* The value is read before the delete: reading it afterwards is what
	 * map_value_after_delete.c is about. */
	if (del) {
		key.addr ^= bpf_htonl(1U << 31) & -(__u32)(data[15] & 8);
		record(2, (__u64)bpf_map_delete_elem(&prefixes, &key));
	}
	return hit ? (__u32)(found >> 32) : 100;
}

char LICENSE[] SEC("license") = "GPL";
