// expect: reject unreleased-reference
// Forgets to submit the record on the early-return path.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("xdp")
int leak(struct xdp_md *ctx)
{
	__u32 *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return XDP_PASS;
	if (ctx->rx_queue_index == 3)
		return XDP_DROP;
	*e = ctx->ingress_ifindex;
	bpf_ringbuf_submit(e, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
