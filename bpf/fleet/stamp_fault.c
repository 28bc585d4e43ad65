/* Fleet test extension, a faulty version 3: meant to stamp 3 into the request, but loops
 * far longer than any class's instruction budget first, so every run stops with the budget
 * exhausted (a failure the host counts in its hook slot). It counts in the same `hits` map
 * as stamp_v1/stamp_v2, so it deploys over them like a real bad release would. */
#include "stamp.h"

SEC("rdx/on_request")
int stamp_fault(struct ctx *c)
{
	count_request();
	__u64 acc = 17;
	__u64 rounds = c->value + 1000000;
#pragma nounroll
	for (__u64 i = 0; i < rounds; i++)
		acc = acc * 31 + (i ^ (acc >> 7));
	c->out = c->out * 10 + 3 + (acc & 0x100000000000ULL);
	return 3;
}
