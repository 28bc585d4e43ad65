// expect: reject uninit-stack
// kernel: skip the privileged kernel lets helpers read uninitialised stack (rdx never does: it is host memory)
// A key struct with padding: the helper would read the 4 uninitialised padding bytes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct key {
	__u32 a;
	__u64 b;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct key);
	__type(value, __u64);
} padded SEC(".maps");

SEC("socket")
int padding(struct __sk_buff *skb)
{
	struct key k;
	k.a = skb->len;
	k.b = skb->hash;
	__u64 *v = bpf_map_lookup_elem(&padded, &k);
	return v ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
