// expect: accept
// Global data: a .bss counter reached through a direct map-value pointer.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 packets = 0;
__u64 bytes = 0;

SEC("xdp")
int totals(struct xdp_md *ctx)
{
	__sync_fetch_and_add(&packets, 1);
	__sync_fetch_and_add(&bytes, ctx->data_end - ctx->data);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
