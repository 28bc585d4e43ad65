/* Instructions of ISA version 4 that clang 14 cannot emit from C, as raw encodings: signed
 * division and modulo (64 and 32 bit, including x / 0, x % 0 and INT_MIN / -1), sign-extending
 * moves (8/16/32 bit into 64, 8/16 bit into 32), unconditional byte swaps (16/32/64),
 * sign-extending loads (8/16/32 bit) and the 32-bit-offset jump `gotol`.
 * Input dependence: n = packet bytes 0..8 (or INT64_MIN when byte 8's top bit is set), the
 * divisor is byte 9 sign-extended (so 0 and -1 come up often), byte 10 picks the gotol path;
 * results[0..20]. */
#include "common.h"

RESULTS_MAP(20);

SEC("xdp")
int cpu_v4(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;
	__u64 n;
	__builtin_memcpy(&n, data, 8);
	if (*(__u8 *)(data + 8) & 0x80)
		n = 0x8000000000000000ULL;
	__s64 dv = (__s8) * (__u8 *)(data + 9);
	__u64 n32 = *(__u8 *)(data + 8) & 0x40 ? 0x80000000ULL : n;

	__u8 buf[8];
	__builtin_memcpy(buf, data + 4, 8);

	__u64 r[20];
	r[0] = RAW_R1_R2(0x000000000001213f, n, dv);   /* r1 s/= r2 */
	r[1] = RAW_R1_R2(0x000000000001219f, n, dv);   /* r1 s%= r2 */
	r[2] = RAW_R1_R2(0x000000000001213c, n32, dv); /* w1 s/= w2 */
	r[3] = RAW_R1_R2(0x000000000001219c, n32, dv); /* w1 s%= w2 */
	r[4] = RAW_R1_R2(0x00000000000821bf, 0, n);    /* r1 = (s8)r2 */
	r[5] = RAW_R1_R2(0x00000000001021bf, 0, n);    /* r1 = (s16)r2 */
	r[6] = RAW_R1_R2(0x00000000002021bf, 0, n);    /* r1 = (s32)r2 */
	r[7] = RAW_R1_R2(0x00000000000821bc, 0, n);    /* w1 = (s8)w2 */
	r[8] = RAW_R1_R2(0x00000000001021bc, 0, n);    /* w1 = (s16)w2 */
	r[9] = RAW_R1_R2(0x00000010000001d7, n, 0);    /* r1 = bswap16 r1 */
	r[10] = RAW_R1_R2(0x00000020000001d7, n, 0);   /* r1 = bswap32 r1 */
	r[11] = RAW_R1_R2(0x00000040000001d7, n, 0);   /* r1 = bswap64 r1 */
	r[12] = RAW_R1_R2(0x0000000000002191, 0, buf); /* r1 = *(s8 *)(r2 + 0) */
	r[13] = RAW_R1_R2(0x0000000000022189, 0, buf); /* r1 = *(s16 *)(r2 + 2) */
	r[14] = RAW_R1_R2(0x0000000000042181, 0, buf); /* r1 = *(s32 *)(r2 + 4) */
	/* gotol +1 skips `r1 = 7` unless the conditional jump before it went there directly:
	 * r1 = n when byte 10 is non-zero, else 7. */
	r[15] = n;
	__u64 sel = *(__u8 *)(data + 10);
	asm volatile("r1 = %[x]\n\tr2 = %[y]\n\tif r2 == 0 goto +1\n\t"
		     ".quad 0x0000000100000006\n\tr1 = 7\n\t%[x] = r1"
		     : [x] "+r"(r[15])
		     : [y] "r"(sel)
		     : "r1", "r2");
	r[16] = RAW_R1_R2(0x000000000001213f, 0x8000000000000000ULL, -1); /* INT64_MIN / -1 */
	r[17] = RAW_R1_R2(0x000000000001219f, 0x8000000000000000ULL, -1); /* INT64_MIN % -1 */
	r[18] = RAW_R1_R2(0x000000000001213c, 0x80000000ULL, -1);         /* INT32_MIN / -1 */
	r[19] = RAW_R1_R2(0x000000000001219f, -7, dv | 1);                 /* -7 s% odd */

	__u64 acc = 0;
#pragma unroll
	for (int i = 0; i < 20; i++) {
		record(i, r[i]);
		acc = acc * 5 + r[i];
	}
	return fold(acc);
}

char LICENSE[] SEC("license") = "GPL";
