/* Extensions for examples/kv-host (context struct kv_context, 336 bytes):
 * - kv_get: counts lookups per first key byte in a per-thread array; answers the key
 *   "magic" with the value "42" whatever is stored.
 * - kv_set: refuses keys starting with "ro_" and upper-cases the first byte of values. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct kv_context {
	__u32 op;
	__u32 key_len;
	__u32 value_len;
	__u32 found;
	unsigned char key[64];
	unsigned char value[256];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u64);
} gets SEC(".maps");

SEC("rdx/kv_get")
int kv_get(struct kv_context *c)
{
	__u32 first = c->key[0];
	__u64 *n = bpf_map_lookup_elem(&gets, &first);
	if (n)
		*n += 1;
	if (c->key_len == 5 && c->key[0] == 'm' && c->key[1] == 'a' && c->key[2] == 'g' &&
	    c->key[3] == 'i' && c->key[4] == 'c') {
		c->value[0] = '4';
		c->value[1] = '2';
		c->value_len = 2;
		return 1;
	}
	return 0;
}

SEC("rdx/kv_set")
int kv_set(struct kv_context *c)
{
	if (c->key_len >= 3 && c->key[0] == 'r' && c->key[1] == 'o' && c->key[2] == '_')
		return 1;
	if (c->value_len > 0 && c->value[0] >= 'a' && c->value[0] <= 'z')
		c->value[0] -= 'a' - 'A';
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
