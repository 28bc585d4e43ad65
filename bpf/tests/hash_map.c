/* Hash maps: per-flow counters keyed by a struct derived from the packet; insert with
 * BPF_NOEXIST when absent (which fails with -E2BIG once the 32-entry map is full), update in
 * place, and delete a flow on its third packet (bpf_map_delete_elem's result is recorded).
 * Input dependence: the key is (byte 14 & 0x3f, byte 15 & 1), so random inputs revisit keys
 * and fill the map; the value adds the frame length. Maps: flows, results. */
#include "common.h"

RESULTS_MAP(4);

struct flow_key {
	__u32 addr;
	__u16 port;
	__u16 pad;
};

struct flow_stats {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32);
	__type(key, struct flow_key);
	__type(value, struct flow_stats);
} flows SEC(".maps");

SEC("xdp")
int hash_map(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	if ((void *)(data + ETH_HLEN + 2) > end)
		return 7;

	struct flow_key key = {
		.addr = data[ETH_HLEN] & 0x3f,
		.port = data[ETH_HLEN + 1] & 1,
		.pad = 0,
	};
	struct flow_stats *stats = bpf_map_lookup_elem(&flows, &key);
	if (!stats) {
		struct flow_stats init = { .packets = 1, .bytes = len };
		long ret = bpf_map_update_elem(&flows, &key, &init, BPF_NOEXIST);
		record(0, (__u64)ret);
		return ret == 0 ? 1 : 2;
	}
	stats->packets += 1;
	stats->bytes += len;
	record(1, stats->packets);
	if (stats->packets >= 3) {
		long ret = bpf_map_delete_elem(&flows, &key);
		record(2, (__u64)ret);
		/* A second delete of the same key must report -ENOENT. */
		record(3, (__u64)bpf_map_delete_elem(&flows, &key));
		return 3;
	}
	return 4;
}

char LICENSE[] SEC("license") = "GPL";
