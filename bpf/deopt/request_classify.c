/* Scouting workload for the on_request hook of the control tests' host: small values (the
 * hot case) are doubled, large ones clamped, zero rejected; every request is counted per
 * class in `classes`. Context: struct { __u64 value; __u64 out; }. */
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
} classes SEC(".maps");

static __always_inline void count(__u32 class)
{
	__u64 *n = bpf_map_lookup_elem(&classes, &class);
	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("rdx/on_request")
int request_classify(struct ctx *c)
{
	__u64 v = c->value;
	if (v == 0) {
		count(0);
		return 0;
	}
	if (v < 1000) {
		count(1);
		c->out = v * 2;
		return 1;
	}
	count(2);
	c->out = 1000;
	return 2;
}

char LICENSE[] SEC("license") = "GPL";
