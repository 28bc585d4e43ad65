/* 32-bit ALU: wrap-around add/sub/mul, unsigned division and modulo including division by
 * zero (raw ALU32 instructions, which also zero the upper half), shifts masked to 31,
 * 32-bit arithmetic right shift, and truncation of 64-bit values.
 * Input dependence: x = packet bytes 0..4, y = bytes 4..8, s = byte 12; results[0..12]. */
#include "common.h"

RESULTS_MAP(12);

SEC("xdp")
int alu32(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;
	__u32 x, y;
	__builtin_memcpy(&x, data, 4);
	__builtin_memcpy(&y, data + 4, 4);
	__u32 s = *(__u8 *)(data + 12);
	__u32 d = s & 3 ? y : 0;

	__u64 r[12];
	r[0] = (__u32)(x + y);
	r[1] = (__u32)(x - y);
	r[2] = (__u32)(x * y);
	r[3] = x / (y | 1);
	r[4] = x % (y | 1);
	/* w1 /= w2 and w1 %= w2 on values whose upper halves are set: the result must be the
	 * 32-bit operation zero-extended. */
	r[5] = RAW_R1_R2(0x000000000000213c, ((__u64)y << 32) | x, d);
	r[6] = RAW_R1_R2(0x000000000000219c, ((__u64)y << 32) | x, d);
	r[7] = (__u32)(x << (s & 31));
	r[8] = x >> (s & 31);
	r[9] = (__u32)((__s32)x >> (s & 31));
	r[10] = (__u32)(-(__s32)x);
	r[11] = (__u32)((x ^ y) + (x & 0xffff) * (y >> 16));

	__u32 acc = 0;
#pragma unroll
	for (int i = 0; i < 12; i++) {
		record(i, r[i]);
		acc = acc * 7 + (__u32)r[i];
	}
	return acc;
}

char LICENSE[] SEC("license") = "GPL";
