/* A fully unrolled loop (`#pragma unroll`) over the first 32 bytes after the Ethernet header,
 * with a bounds check per byte: sum, xor, a rolling hash and the position of the largest byte.
 * Input dependence: bytes 14..46 (fewer when the frame is shorter); results[0..4]. */
#include "common.h"

RESULTS_MAP(4);

SEC("xdp")
int loop_unroll(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data + ETH_HLEN;
	void *end = (void *)(long)ctx->data_end;
	__u64 sum = 0, x = 0, h = 5381, best = 0, best_at = 0;

#pragma unroll
	for (int i = 0; i < 32; i++) {
		if ((void *)(p + i + 1) > end)
			break;
		__u8 b = p[i];
		sum += b;
		x ^= (__u64)b << (i % 8 * 8);
		h = h * 33 + b;
		if (b > best) {
			best = b;
			best_at = i;
		}
	}
	record(0, sum);
	record(1, x);
	record(2, h);
	record(3, best_at);
	return fold(h ^ sum);
}

char LICENSE[] SEC("license") = "GPL";
