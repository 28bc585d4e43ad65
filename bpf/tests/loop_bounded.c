/* A real (not unrolled) bounded loop, which the kernel verifier accepts since 5.3: FNV-1a over
 * the whole frame up to 512 bytes, walking a packet pointer with a bounds check per iteration,
 * plus a count of zero bytes.
 * Input dependence: every byte of the frame (up to 512) and its length; results[0..3]. */
#include "common.h"

RESULTS_MAP(3);

SEC("xdp")
int loop_bounded(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 h = 0xcbf29ce484222325ULL;
	__u32 zeros = 0, n = 0;

#pragma clang loop unroll(disable)
	for (int i = 0; i < 512; i++) {
		if ((void *)(p + 1) > end)
			break;
		h ^= *p;
		h *= 0x100000001b3ULL;
		zeros += *p == 0;
		p++;
		n++;
	}
	record(0, h);
	record(1, zeros);
	record(2, n);
	return fold(h);
}

char LICENSE[] SEC("license") = "GPL";
