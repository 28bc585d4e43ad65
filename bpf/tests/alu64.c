/* 64-bit ALU: add, sub, mul, unsigned division and modulo (including division by zero through
 * the raw instruction, whose result the ISA defines: x / 0 = 0, x % 0 = x), shifts by
 * variable amounts (masked to 63), arithmetic right shift, negation and bitwise operations.
 * Input dependence: a = packet bytes 0..8, b = bytes 6..14 (little-endian), c = byte 13;
 * every result goes to results[0..16] and the return value folds them. */
#include "common.h"

RESULTS_MAP(16);

SEC("xdp")
int alu64(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;
	__u64 a, b;
	__builtin_memcpy(&a, data, 8);
	__builtin_memcpy(&b, data + 6, 8);
	__u64 c = *(__u8 *)(data + 13);
	/* A divisor that is zero for one input byte value in 16. */
	__u64 d = b & 0xf ? b >> (c & 7) : 0;

	__u64 r[16];
	r[0] = a + b;
	r[1] = a - b;
	r[2] = a * b;
	r[3] = a / (b | 1);
	r[4] = a % (b | 1);
	r[5] = RAW_R1_R2(0x000000000000213f, a, d); /* r1 /= r2 (may divide by zero) */
	r[6] = RAW_R1_R2(0x000000000000219f, a, d); /* r1 %= r2 (may divide by zero) */
	r[7] = a << (c & 63);
	r[8] = a >> (c & 63);
	r[9] = (__u64)((__s64)a >> (c & 63));
	r[10] = -a;
	r[11] = (a & b) | (~a & c);
	r[12] = a ^ (b << 7) ^ (c * 0x9e3779b97f4a7c15ULL);
	r[13] = (a * 31 + b) / (c + 1);
	r[14] = a < b ? a : b;
	r[15] = (__s64)a < (__s64)b ? 1 : 2;

	__u64 acc = 0;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		record(i, r[i]);
		acc = acc * 3 + r[i];
	}
	return fold(acc);
}

char LICENSE[] SEC("license") = "GPL";
