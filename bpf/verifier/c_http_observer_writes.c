// expect: reject eim-context
// env: eim eim/http.yaml http_request observer
// The observer class may read the status but not set it.
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

SEC("rdx/http_request")
int overreach(struct http_request *req)
{
	if (req->method == 3)
		req->status = 405;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
