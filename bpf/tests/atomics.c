/* Atomic operations on map values: 64-bit fetch-add/or/and/xor (__sync_fetch_and_*), xchg
 * (__sync_lock_test_and_set), cmpxchg (__sync_val_compare_and_swap) with an expected value
 * that matches only for some inputs, an atomic add whose result is unused (BPF_XADD), and the
 * 32-bit forms (raw encodings, which clang 14 emits only for -mcpu=v3).
 * Input dependence: operands are packet bytes 0..8 and 8..12; the old values returned by the
 * operations go to results, the cells to `cells`, and accumulate across runs. */
#include "common.h"

RESULTS_MAP(10);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} cells SEC(".maps");

static __always_inline __u64 *cell(__u32 k)
{
	return bpf_map_lookup_elem(&cells, &k);
}

/* Runs one raw 32-bit atomic with fetch (dst = r1 = the cell, src = r2 = the operand) and
 * yields r2, the old 32-bit value zero-extended. */
#define ATOMIC32_FETCH(quad, ptr, val)                                                         \
	({                                                                                     \
		__u64 __x = (val);                                                             \
		asm volatile("r1 = %[p]\n\tr2 = %[x]\n\t.quad " #quad "\n\t%[x] = r2"            \
			     : [x] "+r"(__x)                                                   \
			     : [p] "r"(ptr)                                                    \
			     : "r1", "r2", "memory");                                          \
		__x;                                                                           \
	})

SEC("xdp")
int atomics(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;
	__u64 v;
	__u32 w;
	__builtin_memcpy(&v, data, 8);
	__builtin_memcpy(&w, data + 8, 4);

	__u64 *c0 = cell(0), *c1 = cell(1), *c2 = cell(2), *c3 = cell(3);
	__u64 *c4 = cell(4), *c5 = cell(5), *c6 = cell(6), *c7 = cell(7);
	if (!c0 || !c1 || !c2 || !c3 || !c4 || !c5 || !c6 || !c7)
		return 0;

	__u64 r[10];
	r[0] = __sync_fetch_and_add(c0, v);
	r[1] = __sync_fetch_and_or(c1, v);
	r[2] = __sync_fetch_and_and(c2, v | 0xff00ff00ff00ff00ULL);
	r[3] = __sync_fetch_and_xor(c3, v);
	r[4] = __sync_lock_test_and_set(c4, v);
	/* Expected value equals the cell (so the swap happens) when bit 0 of w is set. */
	__u64 expected = (w & 1) ? *c5 : *c5 + 1;
	r[5] = __sync_val_compare_and_swap(c5, expected, v);
	__sync_fetch_and_add(c6, w);
	/* w2 = atomic_fetch_add((u32 *)(r1 + 0), w2): the low half of cell 7. */
	r[6] = ATOMIC32_FETCH(0x00000001000021c3, c7, w);
	/* w2 = xchg32((u32 *)(r1 + 4), w2): the high half of cell 7. */
	r[7] = ATOMIC32_FETCH(0x000000e1000421c3, c7, w ^ 0x5a5a5a5a);
	r[8] = *c6;
	r[9] = *c5;

	__u64 acc = 0;
#pragma unroll
	for (int i = 0; i < 10; i++) {
		record(i, r[i]);
		acc = acc * 11 + r[i];
	}
	return fold(acc);
}

char LICENSE[] SEC("license") = "GPL";
