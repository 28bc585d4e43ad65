/* Runtime containment test program: loops `value` times, so the verifier cannot bound it
 * and the JIT meters it against the hook's instruction budget. Returns a hash of the loop.
 * Context: struct { __u64 value; __u64 out; }. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
};

SEC("rdx/h")
int spin(struct ctx *c)
{
	__u64 acc = 17;
	__u64 n = c->value;
#pragma nounroll
	for (__u64 i = 0; i < n; i++)
		acc = acc * 31 + (i ^ (acc >> 7));
	c->out = acc;
	return (int)(acc & 0xffff);
}

char LICENSE[] SEC("license") = "GPL";
