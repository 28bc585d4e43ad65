/* Conditional jumps: switches over a packet byte (compare chains), signed and unsigned
 * comparisons of 64-bit values (JMP: s<, s<=, s>, s>=, <, <=, >, >=, ==, !=, &) and every
 * 32-bit comparison (JMP32, raw encodings since clang 14 emits them only with -mcpu=v3) on
 * operands whose upper halves differ from their lower halves, and a branch-heavy
 * classification.
 * Input dependence: bytes 0..14; the return value and results[0..5]. */
#include "common.h"

RESULTS_MAP(5);

/* 1 if `if w1 <op> w2 goto +1` jumps, else 0 (`code` is the JMP32|X opcode byte). */
#define JMP32(code, a, b)                                                                      \
	({                                                                                     \
		__u64 __t;                                                                     \
		asm volatile("r1 = %[x]\n\tr2 = %[y]\n\tr3 = 1\n\t"                              \
			     ".quad 0x00000000000121" #code "\n\tr3 = 0\n\t%[t] = r3"             \
			     : [t] "=r"(__t)                                                   \
			     : [x] "r"((__u64)(a)), [y] "r"((__u64)(b))                        \
			     : "r1", "r2", "r3");                                              \
		__t;                                                                           \
	})

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

	__u64 x = a, y;
	__builtin_memcpy(&y, data + 5, 8);
	__u64 j32 = JMP32(1e, x, y) | JMP32(2e, x, y) << 1 | JMP32(3e, x, y) << 2 |
		    JMP32(4e, x, y) << 3 | JMP32(5e, x, y) << 4 | JMP32(6e, x, y) << 5 |
		    JMP32(7e, x, y) << 6 | JMP32(ae, x, y) << 7 | JMP32(be, x, y) << 8 |
		    JMP32(ce, x, y) << 9 | JMP32(de, x, y) << 10 | JMP32(1e, x, x ^ (y << 32)) << 11;

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
	record(4, j32);
	return (__u32)bits ^ (t << 13) ^ (cls << 20) ^ ((__u32)j32 << 3);
}

char LICENSE[] SEC("license") = "GPL";
