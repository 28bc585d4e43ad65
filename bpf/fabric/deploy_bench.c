/* The fabric benchmark's deploy payload: one program both rdx (any hook: it never reads its
 * context) and the kernel (XDP, through libbpf) accept, so "full deploy" compares the same
 * object. Sixteen unrolled rounds of map reads and writes give it a few hundred
 * instructions, the size of a small real extension. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} cells SEC(".maps");

SEC("xdp")
int deploy_bench(void *ctx)
{
	__u64 acc = 0x9e3779b97f4a7c15ULL;

#pragma clang loop unroll(full)
	for (__u32 i = 0; i < 16; i++) {
		__u32 key = i;
		__u64 *v = bpf_map_lookup_elem(&cells, &key);

		if (v) {
			acc = (acc ^ *v) * 0x100000001b3ULL;
			*v = acc ^ (acc >> 29);
		}
	}
	return (acc & 1) ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
