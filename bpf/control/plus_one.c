/* Control-plane test extension, version A: out = value + 1, counts requests in `hits`,
 * counts each value in the `seen` hash, reports each value on the `events` ring buffer,
 * returns 1.
 * Context: struct { __u64 value; __u64 out; } (the on_request hook of the control tests'
 * host and of the demo). */
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("rdx/on_request")
int plus_one(struct ctx *c)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	__u64 v = c->value;
	__u64 *s = bpf_map_lookup_elem(&seen, &v);
	if (s) {
		*s += 1;
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&seen, &v, &one, BPF_ANY);
	}
	bpf_ringbuf_output(&events, &v, sizeof(v), 0);
	c->out = v + 1;
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
