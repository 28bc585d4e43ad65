/* Array maps: a 16-bucket histogram of payload bytes (lookup and increment), a byte counter
 * with __sync_fetch_and_add (BPF_XADD), and bpf_map_update_elem with a key taken from the
 * packet that is out of range for one value in two (the kernel returns -E2BIG; the return
 * value carries it), plus lookups of out-of-range keys (NULL).
 * Input dependence: bytes 14..78 pick histogram buckets; byte 14 picks the update key; the
 * frame length is added to the byte counter. Maps: histogram, totals, results. */
#include "common.h"

RESULTS_MAP(4);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} histogram SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} totals SEC(".maps");

SEC("xdp")
int array_map(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	__u32 key = 0;

	__u64 *bytes = bpf_map_lookup_elem(&totals, &key);
	if (bytes)
		__sync_fetch_and_add(bytes, len);

	__u8 *p = data + ETH_HLEN;
#pragma clang loop unroll(disable)
	for (int i = 0; i < 64; i++) {
		if ((void *)(p + 1) > end)
			break;
		__u32 bucket = *p >> 4;
		__u64 *slot = bpf_map_lookup_elem(&histogram, &bucket);
		if (slot)
			*slot += 1;
		p++;
	}

	if ((void *)(data + ETH_HLEN + 1) > end)
		return 1000;
	/* Keys 0..15: 8..15 are outside `totals`. */
	__u32 upd_key = data[ETH_HLEN] & 15;
	__u64 value = len * 3 + upd_key;
	long ret = bpf_map_update_elem(&totals, &upd_key, &value, BPF_ANY);
	record(0, (__u64)ret);
	__u64 *missing = bpf_map_lookup_elem(&totals, &upd_key);
	record(1, missing ? *missing : 0xdead);
	record(2, upd_key);
	return (__u32)ret + 100;
}

char LICENSE[] SEC("license") = "GPL";
