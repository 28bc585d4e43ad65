/* An http_request extension for examples/c-host (context of eim/http.yaml), of its
 * `responder` class: answers requests under /admin with 403 itself, counts them per method,
 * and lets everything else through. The counters are an array indexed by method (methods
 * are 0..5): its entries always exist, so counting needs only map_lookup_elem, the one map
 * helper the class grants. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct http_request {
	__u32 method;
	__u32 status;
	__u32 path_len;
	__u32 headers_len;
	char path[256];
	char headers[1024];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} blocked SEC(".maps");

SEC("rdx/http_request")
int block_admin(struct http_request *req)
{
	if (req->path_len < 6)
		return 0;
	if (req->path[0] != '/' || req->path[1] != 'a' || req->path[2] != 'd' ||
	    req->path[3] != 'm' || req->path[4] != 'i' || req->path[5] != 'n')
		return 0;
	__u32 key = req->method;
	__u64 *n = bpf_map_lookup_elem(&blocked, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	req->status = 403;
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
