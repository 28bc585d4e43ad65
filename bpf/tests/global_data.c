/* Global data: an initialised counter in .data, a constant table and a volatile constant in
 * .rodata (read with an index from the packet), and zero-initialised accumulators in .bss.
 * libbpf and rdx both expose each section as a one-entry array map; their contents are compared
 * after every run.
 * Input dependence: byte 14 (or 0 on a 14-byte frame) indexes the table; the frame length
 * feeds the accumulators; the counter counts runs. */
#include "common.h"

__u64 runs = 100;                       /* .data */
__u64 total_len;                        /* .bss */
__u32 last_index;                       /* .bss */
__u64 weighted[4];                      /* .bss */
const volatile __u32 scale = 3;         /* .rodata, volatile: always read at run time */
const __u32 table[16] = {               /* .rodata */
	2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53,
};

SEC("xdp")
int global_data(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = (long)end - (long)data;
	__u32 idx = 0;
	if ((void *)(data + ETH_HLEN + 1) <= end)
		idx = data[ETH_HLEN] & 15;

	runs++;
	total_len += len;
	last_index = idx;
	weighted[idx & 3] += (__u64)table[idx] * scale;
	return table[idx] * len + (__u32)runs;
}

char LICENSE[] SEC("license") = "GPL";
