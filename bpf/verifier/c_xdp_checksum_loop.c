// expect: accept
// A bounded loop over the first 64 packet bytes, each access checked against data_end.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int checksum(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;
	__u32 sum = 0;
	for (int i = 0; i < 64; i++) {
		if (p + i + 1 > end)
			break;
		sum += p[i];
	}
	return sum & 1 ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
