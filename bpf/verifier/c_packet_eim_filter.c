// expect: accept
// env: eim eim/packet.yaml packet_in filter
// Drops IPv6 packets on the packet_in hook; counts dropped ones per interface.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct packet_ctx {
	__u64 data;
	__u64 data_end;
	__u32 ifindex;
	__u32 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

SEC("rdx/packet_in")
int drop_v6(struct packet_ctx *ctx)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return 0;
	if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 0;
	__u32 key = ctx->ifindex;
	__u64 *n = bpf_map_lookup_elem(&drops, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
