/* Fleet test extension, version 1: stamps 1 into the request (out = out * 10 + 1, so a
 * request that crossed a chain of hops carries one digit per hop), counts requests in
 * `hits` (shared by name across versions), returns 1.
 * Context: struct { __u64 value; __u64 out; } (the on_request hook of fleet-host). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

SEC("rdx/on_request")
int stamp_v1(struct ctx *c)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	c->out = c->out * 10 + 1;
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
