// Several programs in one object, sharing subprograms in .text, BTF-defined maps and global
// data. Exercises everything the loader links: map references, global-data references
// (.data, .rodata, .bss), BPF-to-BPF calls (global and static, nested) and custom rdx hooks.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} bytes_by_proto SEC(".maps");

struct stats {
	__u64 packets;
	__u64 dropped;
	__u32 last_len;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

/* .rodata: configuration the control plane may rewrite before deploying. */
const volatile __u32 drop_threshold = 1000;
const volatile __u8 drop_proto = 17;

/* .data and .bss: mutable program state. */
__u64 seen_total = 7;
__u64 hook_calls;
/* A named data section (.data.<name>): its own one-entry array map. */
__u32 last_request_words[2] SEC(".data.requests") = { 1, 2 };

static __attribute__((noinline)) __u64 mix(__u64 a, __u64 b)
{
	return (a ^ (b << 7)) + (b >> 3);
}

__attribute__((noinline)) int account(__u32 proto, __u32 len)
{
	__u64 *bytes = bpf_map_lookup_elem(&bytes_by_proto, &proto);
	if (bytes) {
		__sync_fetch_and_add(bytes, len);
	} else {
		__u64 init = len;
		bpf_map_update_elem(&bytes_by_proto, &proto, &init, BPF_ANY);
	}
	__u32 key = 0;
	struct stats *s = bpf_map_lookup_elem(&stats, &key);
	if (s) {
		s->packets++;
		s->last_len = len;
	}
	seen_total += len;
	return len > drop_threshold;
}

static __attribute__((noinline)) int should_drop(__u32 proto, __u32 len)
{
	if (proto == drop_proto)
		return 1;
	return account(proto, len);
}

SEC("socket")
int classify(struct __sk_buff *skb)
{
	return should_drop(skb->protocol, skb->len) ? 0 : skb->len;
}

SEC("xdp")
int xdp_gate(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 len = end - data;
	if (data + 14 > end)
		return XDP_DROP;
	__u8 proto = ((__u8 *)data)[13];
	if (should_drop(proto, len)) {
		__u32 key = 0;
		struct stats *s = bpf_map_lookup_elem(&stats, &key);
		if (s)
			s->dropped++;
		return XDP_DROP;
	}
	return XDP_PASS;
}

/* A host-defined hook: the context is whatever the host exports for `request`. */
SEC("rdx/request")
__u64 on_request(__u64 *ctx)
{
	hook_calls++;
	last_request_words[0] = (__u32)ctx[0];
	bpf_printk("request %llu", hook_calls);
	return mix(ctx[0], hook_calls);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
