/* What the fleet test extensions share: the context of rdx-test-host's hooks,
 * struct { __u64 value; __u64 out; }, and the `hits` counter, one map shared by name across
 * the versions so that a new version deploys over an old one as a real release would (the
 * live migration tests count on its value). Included by exactly one program per object. */
#ifndef RDX_FLEET_STAMP_H
#define RDX_FLEET_STAMP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct ctx {
	__u64 value;
	__u64 out;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

/* Counts one request in `hits`. */
static __always_inline void count_request(void)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&hits, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
}

char LICENSE[] SEC("license") = "GPL";

#endif
