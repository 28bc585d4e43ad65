/* The storage sandbox's exported entries. `lookup` is the cache-and-store example's miss
 * path: the context is the caller's 8-byte key; the 8-byte value goes back through
 * xcall_reply; r0 = 1 when found, 0 when not. `empty` does nothing (the benchmark's empty
 * call). The same object's `put` program is the storage host's own write path (a hook in
 * the storage process, not exported). */
#include "xcall.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} store_kv SEC(".maps");

struct key_arg {
	__u64 key;
};

SEC("rdx/lookup")
int lookup(struct key_arg *a)
{
	__u64 key = a->key;
	__u64 *v = bpf_map_lookup_elem(&store_kv, &key);
	if (!v)
		return 0;
	__u64 value = *v;
	xcall_reply(&value, sizeof(value));
	return 1;
}

SEC("rdx/empty")
int empty(struct key_arg *a)
{
	return 0;
}

struct put_ctx {
	__u64 key;
	__u64 value;
};

SEC("rdx/put")
int put(struct put_ctx *c)
{
	__u64 key = c->key, value = c->value;
	return bpf_map_update_elem(&store_kv, &key, &value, BPF_ANY) == 0;
}

char LICENSE[] SEC("license") = "GPL";
