// expect: accept
// A struct key and value built on the stack (fully initialised) and stored with update.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct key {
	__u32 ifindex;
	__u32 queue;
};
struct stats {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct key);
	__type(value, struct stats);
} per_queue SEC(".maps");

SEC("xdp")
int queue_stats(struct xdp_md *ctx)
{
	struct key k = { .ifindex = ctx->ingress_ifindex, .queue = ctx->rx_queue_index };
	struct stats *s = bpf_map_lookup_elem(&per_queue, &k);
	if (s) {
		s->packets++;
		s->bytes += ctx->data_end - ctx->data;
		return XDP_PASS;
	}
	struct stats init = { .packets = 1, .bytes = ctx->data_end - ctx->data };
	bpf_map_update_elem(&per_queue, &k, &init, BPF_ANY);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
