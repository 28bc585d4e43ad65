/* Exported entries that misbehave, for the containment tests.
 * `spin`: never finishes on its own (the instruction budget stops it).
 * `slow_v1` / `slow_v2`: busy for the number of nanoseconds in the argument, then reply their
 * version (1 or 2): the callee-replaced-mid-call test.
 * `uses_printk`: calls a helper that has no cross-sandbox meaning (refused at deploy). */
#include "xcall.h"

struct arg {
	__u64 n;
};

SEC("rdx/spin")
int spin(struct arg *a)
{
	volatile __u64 x = a->n;
	for (;;) {
		x = x * 3 + 1;
		if (x == 0)
			break;
	}
	return 0;
}

static __always_inline int slow(struct arg *a, __u64 version)
{
	__u64 until = bpf_ktime_get_ns() + a->n;
	while (bpf_ktime_get_ns() < until)
		;
	xcall_reply(&version, sizeof(version));
	return (int)version;
}

SEC("rdx/slow")
int slow_v1(struct arg *a)
{
	return slow(a, 1);
}

SEC("rdx/slow")
int slow_v2(struct arg *a)
{
	return slow(a, 2);
}

SEC("rdx/slow")
int uses_printk(struct arg *a)
{
	char fmt[] = "hi";
	bpf_trace_printk(fmt, sizeof(fmt));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
