// expect: reject out-of-bounds
// Reads the Ethernet type without comparing against data_end first.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int no_bounds(struct xdp_md *ctx)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	return eth->h_proto == 8 ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
