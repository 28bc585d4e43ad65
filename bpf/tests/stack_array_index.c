/* A variable-offset read of an initialised u64 stack array (`buf[len & 7]`, what clang emits
 * as `r1 = r10; r1 += -64; r1 += idx; r0 = *(u64 *)(r1 + 0)`), for every index the packet
 * bytes pick. Input dependence: bytes 0..14; results[0..2]. */
#include "common.h"

RESULTS_MAP(2);

SEC("xdp")
int stack_array_index(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;

	__u64 buf[8] = {};
	for (int i = 0; i < 8; i++)
		buf[i] = (__u64)*(__u8 *)(data + i) * 0x0101010101010101ULL + i;
	__u64 first = buf[*(__u8 *)(data + 12) & 7];
	__u64 second = buf[*(__u8 *)(data + 13) & 7];
	record(0, first);
	record(1, second);
	return fold(first ^ second);
}

char LICENSE[] SEC("license") = "GPL";
