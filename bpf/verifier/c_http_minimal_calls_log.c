// expect: reject eim-function
// env: eim eim/http.yaml http_request minimal
// The minimal class grants no host functions.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct http_request {
	__u32 method;
};

static long (*log_msg)(const void *msg, __u32 len) = (void *)1002;

SEC("rdx/http_request")
int chatty(struct http_request *req)
{
	char m[8] = "method";
	if (req->method == 1)
		log_msg(m, sizeof(m));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
