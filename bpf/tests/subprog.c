/* BPF-to-BPF calls: noinline subprograms four levels deep, with five arguments, a pointer to
 * the caller's stack that the callee fills, packet pointers passed down, and a callee that
 * calls a helper. Each level mixes its arguments so that a wrong argument or return register
 * changes the result.
 * Input dependence: bytes 14..30 of the frame (as many 4-byte groups as are present) feed
 * every level; results[0..6]. */
#include "common.h"

RESULTS_MAP(6);

struct acc {
	__u64 sum;
	__u64 mix;
	__u32 calls;
};

static __attribute__((noinline)) __u64 level4(__u64 a, __u64 b, __u64 c, __u64 d, __u64 e)
{
	return (a * 3) ^ (b << 1) ^ (c >> 2) ^ (d * 7) ^ (e + 11);
}

static __attribute__((noinline)) void level3(struct acc *acc, __u64 x, __u64 y)
{
	acc->sum += level4(x, y, acc->sum, acc->mix, acc->calls);
	acc->mix = (acc->mix << 7) ^ (acc->mix >> 3) ^ x;
	acc->calls++;
}

static __attribute__((noinline)) __u64 level2(struct acc *acc, __u8 *p, void *end)
{
	__u64 local = 0;
	for (int i = 0; i < 4; i++) {
		if ((void *)(p + i + 1) > end)
			break;
		level3(acc, p[i], i);
		local += p[i];
	}
	__u32 k = 5;
	__u64 *slot = bpf_map_lookup_elem(&results, &k);
	if (slot)
		*slot += local;
	return local;
}

static __attribute__((noinline)) __u64 level1(struct acc *acc, __u8 *p, void *end, __u32 n)
{
	__u64 total = 0;
	for (__u32 i = 0; i < 4; i++) {
		if (i >= n)
			break;
		total = total * 257 + level2(acc, p + i * 4, end);
	}
	return total;
}

SEC("xdp")
int subprog(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct acc acc = { .sum = 1, .mix = 2, .calls = 0 };
	__u32 len = (long)end - (long)data;
	__u64 total = level1(&acc, data + ETH_HLEN, end, len > 30 ? 4 : (len - 14) / 4);
	record(0, total);
	record(1, acc.sum);
	record(2, acc.mix);
	record(3, acc.calls);
	record(4, level4(total, acc.sum, acc.mix, len, acc.calls));
	return fold(total ^ acc.sum ^ acc.mix);
}

char LICENSE[] SEC("license") = "GPL";
