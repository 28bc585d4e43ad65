/* Shared by the differential corpus (the .c files in bpf/tests): headers, the `results` map every program
 * records its intermediate values in, and raw encodings of instructions clang 14 cannot emit
 * from C (signed division, sign-extending moves and loads, unconditional byte swaps, gotol,
 * 32-bit atomics), which the kernel has verified and run since 6.6. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* An array map `results` of `n` u64 slots, compared entry by entry after every run. */
#define RESULTS_MAP(n)                                                                         \
	struct {                                                                               \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                              \
		__uint(max_entries, n);                                                        \
		__type(key, __u32);                                                            \
		__type(value, __u64);                                                          \
	} results SEC(".maps")

#define record(idx, val)                                                                       \
	do {                                                                                   \
		__u32 __k = (idx);                                                             \
		__u64 *__v = bpf_map_lookup_elem(&results, &__k);                              \
		if (__v)                                                                       \
			*__v = (val);                                                          \
	} while (0)

/* Folds a 64-bit value into the 32-bit return value BPF_PROG_TEST_RUN reports. */
static __always_inline __u32 fold(__u64 v)
{
	return (__u32)v ^ (__u32)(v >> 32);
}

/* Runs one raw 8-byte instruction (written as a little-endian .quad) with r1 = a and
 * r2 = b and yields r1. The encodings use dst = r1, src = r2. */
#define RAW_R1_R2(quad, a, b)                                                                  \
	({                                                                                     \
		__u64 __x = (__u64)(a);                                                        \
		__u64 __y = (__u64)(b);                                                        \
		asm volatile("r1 = %[x]\n\tr2 = %[y]\n\t.quad " #quad "\n\t%[x] = r1"          \
			     : [x] "+r"(__x)                                                   \
			     : [y] "r"(__y)                                                    \
			     : "r1", "r2", "memory");                                          \
		__x;                                                                           \
	})

