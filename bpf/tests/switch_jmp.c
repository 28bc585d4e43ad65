/* Conditional jumps: a switch over a packet byte (clang turns the constant cases into a lookup
 * table in .rodata and the rest into compare chains), signed and unsigned comparisons in 64
 * and 32 bit (JMP and JMP32: s<, s<=, s>, s>=, <, <=, >, >=, ==, !=, &), and a
 * branch-heavy classification.
 * Input dependence: bytes 0..14; the return value and results[0..4]. */
#include "common.h"

RESULTS_MAP(4);

static __attribute__((noinline)) __u32 table_case(__u32 k)
{
	switch (k) {
	case 0: return 17;
	case 1: return 4;
	case 2: return 99;
	case 3: return 1;
	case 4: return 250;
	case 5: return 8;
	case 6: return 63;
	default: return 1000;
	}
}

SEC("xdp")
int switch_jmp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;
	__s64 a;
	__s32 b, c;
	__builtin_memcpy(&a, data, 8);
	__builtin_memcpy(&b, data + 8, 4);
	__builtin_memcpy(&c, data + 10, 4);
	__u8 k = *(__u8 *)(data + 13);

	__u64 bits = 0;
	bits |= (a < 0) << 0;
	bits |= (a <= -5) << 1;
	bits |= (a > 1000) << 2;
	bits |= (a >= (__s64)b) << 3;
	bits |= (b < c) << 4;
	bits |= (b <= -100) << 5;
	bits |= (b > c) << 6;
	bits |= (b >= 0) << 7;
	bits |= ((__u32)b < (__u32)c) << 8;
	bits |= ((__u64)a > (__u64)(__s64)c) << 9;
	bits |= ((__u32)b == (__u32)c) << 10;
	bits |= ((a & 0x80) != 0) << 11;
	bits |= ((b & 0x100) == 0) << 12;

	__u32 t = table_case(k & 7);
	__u32 cls;
	switch (k >> 4) {
	case 0:
		cls = b > 0 ? 1 : 2;
		break;
	case 3:
	case 5:
		cls = 3;
		break;
	case 9:
		cls = (__u32)(a >> 40);
		break;
	case 15:
		cls = c < -7 ? 4 : 5;
		break;
	default:
		cls = k;
	}
	record(0, bits);
	record(1, t);
	record(2, cls);
	record(3, k);
	return (__u32)bits ^ (t << 13) ^ (cls << 20);
}

char LICENSE[] SEC("license") = "GPL";
