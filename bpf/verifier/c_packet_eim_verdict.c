// expect: reject return-value
// env: eim eim/packet.yaml packet_in filter
// Returns the length as a verdict, outside the hook's range [0, 1].
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct packet_ctx {
	__u64 data;
	__u64 data_end;
	__u32 ifindex;
	__u32 len;
};

SEC("rdx/packet_in")
int bad_verdict(struct packet_ctx *ctx)
{
	return ctx->len;
}

char LICENSE[] SEC("license") = "GPL";
