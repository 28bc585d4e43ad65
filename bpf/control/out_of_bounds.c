/* Must be refused by the verifier: reads past the end of the 16-byte on_request context. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
	__u64 beyond;
};

SEC("rdx/on_request")
int out_of_bounds(struct ctx *c)
{
	c->out = c->beyond;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
