// expect: accept
// Reserves a ring-buffer record, fills it and submits it.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

struct event {
	__u32 ifindex;
	__u32 len;
};

SEC("xdp")
int report(struct xdp_md *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return XDP_PASS;
	e->ifindex = ctx->ingress_ifindex;
	e->len = ctx->data_end - ctx->data;
	bpf_ringbuf_submit(e, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
