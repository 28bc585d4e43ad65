/* Deoptimisation workload with a loop: scans up to 32 payload bytes, counting byte classes
 * in a hash map and emitting an event for each rare byte, so guards fire inside a loop after
 * side effects of earlier iterations. Maps: classes, events. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

static __always_inline void count(__u32 class)
{
	__u64 one = 1;
	__u64 *v = bpf_map_lookup_elem(&classes, &class);
	if (v)
		*v += 1;
	else
		bpf_map_update_elem(&classes, &class, &one, BPF_NOEXIST);
}

SEC("xdp")
int scan_loop(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u64 acc = 0;
	for (int i = 0; i < 32; i++) {
		if (data + i + 1 > end)
			break;
		__u8 b = data[i];
		if (b < 0x80) {
			count(0);
			acc += b;
		} else if (b < 0xf0) {
			count(1);
			acc ^= b;
		} else {
			count(2 + (b & 3));
			__u64 ev[2] = { i, b };
			bpf_ringbuf_output(&events, ev, sizeof(ev), 0);
			if (b == 0xff)
				return XDP_DROP;
		}
	}
	return acc & 1 ? XDP_TX : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
