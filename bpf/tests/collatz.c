/* A loop whose trip count depends on the data: Collatz steps from a 16-bit start value until 1,
 * at most 300 iterations, with a branch-free step (mask arithmetic, so the verifier's state
 * count stays linear) and a data-dependent exit; 64-bit multiply, shift, negation and masks.
 * Input dependence: start = bytes 0..2 of the frame plus 1 (never 0), bounded by 300 steps;
 * results[0..3] = steps, sum of the values visited, final value. */
#include "common.h"

RESULTS_MAP(3);

SEC("xdp")
int collatz(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 4 > end)
		return 0;
	__u32 start;
	__builtin_memcpy(&start, data, 4);
	__u64 n = (__u64)(start & 0xffff) + 1;
	__u64 sum = n;
	__u32 steps = 0;

#pragma clang loop unroll(disable)
	for (int i = 0; i < 300; i++) {
		if (n == 1)
			break;
		__u64 odd = -(n & 1);
		n = ((3 * n + 1) & odd) | ((n >> 1) & ~odd);
		sum += n;
		steps++;
	}
	record(0, steps);
	record(1, sum);
	record(2, n);
	return steps;
}

char LICENSE[] SEC("license") = "GPL";
