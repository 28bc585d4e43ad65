// expect: accept
// env: eim eim/http.yaml http_request observer
// Reads the path, logs long requests with a timestamp, and reads the host's request count.
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

static __u64 (*get_time)(void) = (void *)1001;
static long (*log_msg)(const void *msg, __u32 len) = (void *)1002;
static __u64 *(*request_count)(void) = (void *)2001;

SEC("rdx/http_request")
int observe(struct http_request *req)
{
	char msg[16] = "slow request";
	__u64 t = get_time();
	__u64 *n = request_count();
	if (req->path_len > 200 && req->path[0] == '/') {
		msg[15] = (char)(t & 0x7f);
		log_msg(msg, sizeof(msg));
	}
	return *n > 1000000 ? 0 : 0;
}

char LICENSE[] SEC("license") = "GPL";
