/* Stack memory: a struct with 1-, 2-, 4- and 8-byte fields at their natural offsets, filled
 * from unaligned packet reads, __builtin_memset/__builtin_memcpy on stack buffers, narrow loads
 * of wide stores (byte 3 of a u32 just written) and a variable-offset read of a stack array.
 * Also records the xdp_md fields a test run defines (ingress_ifindex, rx_queue_index).
 * Input dependence: bytes 0..14; results[0..6]. */
#include "common.h"

RESULTS_MAP(6);

struct mixed {
	__u8 a;
	__u8 b;
	__u16 c;
	__u32 d;
	__u64 e;
	__u8 tail[8];
};

SEC("xdp")
int stack_mem(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		return 0;

	struct mixed m;
	__builtin_memset(&m, 0x5c, sizeof(m));
	m.a = *(__u8 *)(data + 1);
	__builtin_memcpy(&m.c, data + 3, 2);
	__builtin_memcpy(&m.d, data + 5, 4);
	__builtin_memcpy(&m.e, data + 1, 8);
	__builtin_memcpy(m.tail, data + 6, 8);

	volatile __u32 word = m.d ^ 0x01020304;
	__u8 third = ((volatile __u8 *)&word)[3];

	__u8 arr[16];
	__builtin_memcpy(arr, &m.e, 8);
	__builtin_memcpy(arr + 8, m.tail, 8);
	__u8 pick = arr[*(__u8 *)(data + 13) & 15];

	record(0, ((__u64)m.a << 56) | ((__u64)m.b << 48) | ((__u64)m.c << 32) | m.d);
	record(1, m.e);
	record(2, third);
	record(3, pick);
	__u64 tail;
	__builtin_memcpy(&tail, m.tail, 8);
	record(4, tail);
	/* The test-run context: loopback device, queue 0. */
	record(5, ((__u64)ctx->ingress_ifindex << 32) | ctx->rx_queue_index);
	return fold(m.e ^ tail) + third + pick;
}

char LICENSE[] SEC("license") = "GPL";
