// A callback passed to a helper: bpf_loop receives add_index by address, so the object holds
// an `lddw` of a function (ImmKind::Func once loaded) rather than a call. The loader appends
// the callback to the program like any subprogram. (rdx's interpreter does not provide
// bpf_loop yet; `rdx inspect` shows the linked program.)
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct loop_state {
	__u64 sum;
	__u64 limit;
};

static int add_index(__u32 index, void *data)
{
	struct loop_state *s = data;
	s->sum += index;
	return s->sum > s->limit;
}

SEC("rdx/sum")
__u64 sum_indices(__u64 *ctx)
{
	struct loop_state s = { .sum = 0, .limit = ctx[0] };
	bpf_loop(64, add_index, &s, 0);
	return s.sum;
}

char LICENSE[] SEC("license") = "GPL";
