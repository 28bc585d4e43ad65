/* Runtime end-to-end test program: counts calls per key (value & 7) in a hash map, writes
 * the count into the context and returns count + 100; logs through bpf_trace_printk.
 * Context: struct { __u64 value; __u64 out; } (the hook context of rdx-test-host). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("rdx/h")
int count(struct ctx *c)
{
	__u32 key = c->value & 7;
	__u64 *v = bpf_map_lookup_elem(&counts, &key);
	if (!v) {
		__u64 one = 1;
		bpf_map_update_elem(&counts, &key, &one, BPF_ANY);
		c->out = 1;
		bpf_printk("first call for key %u", key);
		return 101;
	}
	*v += 1;
	c->out = *v;
	return *v + 100;
}

char LICENSE[] SEC("license") = "GPL";
