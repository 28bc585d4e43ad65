/* The caller's instruction budget covers a cross-sandbox call (crates/xcall/tests/budget.rs).
 * `count` (callee, deployed as the storage's `spin` export): replies 1, 2, ... n, one reply per
 * iteration, so the caller's output holds how far it got even when its budget stops it; n comes
 * from the caller, so the loop is metered.
 * `charged_call` (caller): reads its own remaining budget around a call to `count`; then runs
 * `tail` loop iterations, which stop it if the call left it no budget. */
#include "xcall.h"

#define STORAGE_SLOT 20
#define COUNT_EXPORT 2

struct arg {
	__u64 n;
};

SEC("rdx/spin")
int count(struct arg *a)
{
	__u64 n = a->n;
	for (__u64 i = 1; i <= n; i++)
		xcall_reply(&i, sizeof(i));
	return 1;
}

XCALL_CAPABILITY(call_count, 1100);
static __u64 (*budget_left)(void) = (void *)1101;

struct charged {
	__u64 n;
	__u64 tail;
	__u64 before;
	__u64 after;
	__u64 rc;
	__u64 out;
};

SEC("rdx/on_call")
int charged_call(struct charged *r)
{
	__u64 n = r->n;
	__u64 out = 0;
	r->before = budget_left();
	long rc = call_count(XCALL_TARGET(STORAGE_SLOT, COUNT_EXPORT), &n, sizeof(n), &out,
			     sizeof(out));
	r->after = budget_left();
	r->rc = (__u64)rc;
	r->out = out;
	volatile __u64 acc = 0;
	__u64 tail = r->tail;
	for (__u64 i = 0; i < tail; i++)
		acc += i;
	return acc == 0x12345678; /* reads it: keeps the loop */
}

char LICENSE[] SEC("license") = "GPL";
