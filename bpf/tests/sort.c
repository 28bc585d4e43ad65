/* Sorting: an insertion sort (two nested real loops) of up to 16 bytes copied from the frame
 * into a stack array, written back over the frame in sorted order, plus the median and the
 * number of inversions (swaps) it took.
 * Input dependence: bytes 14..30 (only those present are sorted); the frame out, results[0..3]. */
#include "common.h"

RESULTS_MAP(3);

#define N 16

SEC("xdp")
int sort(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data + ETH_HLEN;
	__u8 a[N] = {};
	__u32 n = 0;

#pragma clang loop unroll(disable)
	for (int i = 0; i < N; i++) {
		if ((void *)(p + i + 1) > end)
			break;
		a[i] = p[i];
		n++;
	}

	__u32 swaps = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 1; i < N; i++) {
		if (i >= n)
			break;
#pragma clang loop unroll(disable)
		for (__u32 j = i; j > 0 && j < N; j--) {
			if (a[j - 1] <= a[j])
				break;
			__u8 t = a[j];
			a[j] = a[j - 1];
			a[j - 1] = t;
			swaps++;
		}
	}

#pragma clang loop unroll(disable)
	for (int i = 0; i < N; i++) {
		if ((void *)(p + i + 1) > end)
			break;
		p[i] = a[i];
	}
	__u8 median = a[(n / 2) & (N - 1)];
	record(0, median);
	record(1, swaps);
	record(2, n);
	return (swaps << 8) | median;
}

char LICENSE[] SEC("license") = "GPL";
