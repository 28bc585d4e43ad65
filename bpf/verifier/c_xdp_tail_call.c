// expect: accept
// A tail call through a program array, falling back to pass when the slot is empty.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} jump SEC(".maps");

SEC("xdp")
int dispatch(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &jump, ctx->rx_queue_index & 3);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
