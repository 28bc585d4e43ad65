/* Fleet test extension, a faulty version 3: meant to stamp 3 into the request, but loops
 * far longer than any class's instruction budget first, so every run stops with the budget
 * exhausted (a failure the host counts in its hook slot). Uses the same `hits` map as
 * stamp_v1/stamp_v2, so it deploys over them like a real bad release would.
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
int stamp_fault(struct ctx *c)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	__u64 acc = 17;
	__u64 rounds = c->value + 1000000;
#pragma nounroll
	for (__u64 i = 0; i < rounds; i++)
		acc = acc * 31 + (i ^ (acc >> 7));
	c->out = c->out * 10 + 3 + (acc & 0x100000000000ULL);
	return 3;
}

char LICENSE[] SEC("license") = "GPL";
