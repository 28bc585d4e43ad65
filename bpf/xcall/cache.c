/* The cache sandbox's request hook (examples/cache-and-store): a hit is served from the
 * cache's own map; a miss calls the storage sandbox's `lookup` entry directly, on this
 * thread, and fills the cache.
 * Context: struct { key; value (out); source (out): 1 hit, 2 storage, 3 absent, 4 error }.
 * The call's negative errno is left in `value` when source is 4. */
#include "xcall.h"

#ifndef STORAGE_SLOT
#define STORAGE_SLOT 1
#endif
#define LOOKUP_EXPORT 0

XCALL_CAPABILITY(call_storage_lookup, 1100);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} cache_kv SEC(".maps");

struct request {
	__u64 key;
	__u64 value;
	__u64 source;
};

SEC("rdx/on_get")
int on_get(struct request *r)
{
	__u64 key = r->key;
	__u64 *hit = bpf_map_lookup_elem(&cache_kv, &key);
	if (hit) {
		r->value = *hit;
		r->source = 1;
		return 0;
	}
	__u64 value = 0;
	long rc = call_storage_lookup(XCALL_TARGET(STORAGE_SLOT, LOOKUP_EXPORT), &key, sizeof(key),
				      &value, sizeof(value));
	if (rc < 0) {
		r->value = (__u64)rc;
		r->source = 4;
		return 0;
	}
	if (rc == 0) {
		r->value = 0;
		r->source = 3;
		return 0;
	}
	bpf_map_update_elem(&cache_kv, &key, &value, BPF_ANY);
	r->value = value;
	r->source = 2;
	return 0;
}

/* Calls the storage entry with a 16-byte argument where 8 are declared: the verifier must
 * refuse it under a capability bounding args_len to 8. */
SEC("rdx/on_get")
int oversized(struct request *r)
{
	__u64 args[2] = { r->key, 0 };
	__u64 value = 0;
	long rc = call_storage_lookup(XCALL_TARGET(STORAGE_SLOT, LOOKUP_EXPORT), args, sizeof(args),
				      &value, sizeof(value));
	r->value = (__u64)rc;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
