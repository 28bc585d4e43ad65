// expect: accept
// env: eim eim/http.yaml http_request responder
// Answers /admin with 403 directly.
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
int respond(struct http_request *req)
{
	if (req->path_len < 6)
		return 0;
	if (req->path[0] != '/' || req->path[1] != 'a' || req->path[2] != 'd' ||
	    req->path[3] != 'm' || req->path[4] != 'i' || req->path[5] != 'n')
		return 0;
	req->status = 403;
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
