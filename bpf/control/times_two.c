/* Control-plane test extension, version B: out = value * 2, counts requests in the same
 * `hits` map as plus_one.c (so the count survives an upgrade and a rollback), returns 2. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

SEC("rdx/on_request")
int times_two(struct ctx *c)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	c->out = c->value * 2;
	return 2;
}

char LICENSE[] SEC("license") = "GPL";
