/*
 * c-host: a small HTTP/1.1 server in C whose request hook is extensible with rdx.
 *
 * Each request is parsed into `struct http_request` (the context of eim/http.yaml), then the
 * `http_request` hook runs. If the attached extension returns 1, the server answers at once
 * with the status the extension wrote; otherwise it routes normally:
 *   GET /        200 "hello from c-host"
 *   GET /stats   200 hook counters
 *   anything else 404
 * The server itself never loads extensions: a control plane deploys them into the region
 * whose path it prints at start.
 *
 * usage: c-host [--port N] [--threads N] [--path REGION] [--eim SPEC.yaml]
 * prints: "region <path>" and "listening <port>", one per line, then serves until SIGINT/SIGTERM.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdx.h"

/* The context of the http_request hook: eim/http.yaml, 1296 bytes, no padding. */
struct http_request {
	uint32_t method; /* 1=GET 2=HEAD 3=POST 4=PUT 5=DELETE 0=other */
	uint32_t status; /* response status the extension may set */
	uint32_t path_len;
	uint32_t headers_len;
	char path[256];
	char headers[1024];
};
_Static_assert(sizeof(struct http_request) == 1296, "layout of eim/http.yaml");
_Static_assert(__builtin_offsetof(struct http_request, headers) == 272, "layout of eim/http.yaml");

static rdx_hook *request_hook;
static _Atomic uint64_t request_count;
static int listen_fd = -1;

static uint64_t host_get_time(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	(void)a, (void)b, (void)c, (void)d, (void)e;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t host_log(uint64_t msg, uint64_t len, uint64_t c, uint64_t d, uint64_t e)
{
	(void)c, (void)d, (void)e;
	if (len > 4096)
		return (uint64_t)-EINVAL;
	fprintf(stderr, "c-host: extension: %.*s\n", (int)len, (const char *)(uintptr_t)msg);
	return 0;
}

/* Variable 2001 of the EIM spec: extensions call it to get the counter's address. */
static uint64_t host_request_count(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	(void)a, (void)b, (void)c, (void)d, (void)e;
	return (uint64_t)(uintptr_t)&request_count;
}

static uint32_t method_code(const char *m, size_t n)
{
	static const char *names[] = { "GET", "HEAD", "POST", "PUT", "DELETE" };
	for (uint32_t i = 0; i < 5; i++)
		if (strlen(names[i]) == n && memcmp(names[i], m, n) == 0)
			return i + 1;
	return 0;
}

static void reply(int fd, unsigned status, const char *body)
{
	char head[256];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %u %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
			 status == 200 ? "OK" : status == 404 ? "Not Found" : "Extension", blen);
	if (write(fd, head, (size_t)n) < 0 || (blen && write(fd, body, blen) < 0))
		perror("c-host: write");
}

static void serve(int fd)
{
	char buf[8192];
	size_t len = 0;
	char *end = NULL;
	while (len < sizeof buf - 1) {
		ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
		buf[len] = 0;
		if ((end = strstr(buf, "\r\n\r\n")))
			break;
	}
	if (!end) {
		reply(fd, 400, NULL);
		return;
	}
	struct http_request req;
	memset(&req, 0, sizeof req);
	char *sp1 = memchr(buf, ' ', (size_t)(end - buf));
	char *line_end = strstr(buf, "\r\n");
	char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
	if (!sp1 || !sp2) {
		reply(fd, 400, NULL);
		return;
	}
	req.method = method_code(buf, (size_t)(sp1 - buf));
	size_t plen = (size_t)(sp2 - sp1 - 1);
	if (plen > sizeof req.path)
		plen = sizeof req.path;
	memcpy(req.path, sp1 + 1, plen);
	req.path_len = (uint32_t)plen;
	size_t hlen = (size_t)(end - (line_end + 2));
	if (hlen > sizeof req.headers)
		hlen = sizeof req.headers;
	memcpy(req.headers, line_end + 2, hlen);
	req.headers_len = (uint32_t)hlen;
	req.status = 200;

	atomic_fetch_add(&request_count, 1);
	uint64_t verdict = rdx_run_hook(request_hook, &req);
	if (verdict == 1) {
		reply(fd, req.status >= 100 && req.status <= 599 ? req.status : 500, NULL);
		return;
	}
	if (req.path_len == 1 && req.path[0] == '/') {
		reply(fd, 200, "hello from c-host\n");
	} else if (req.path_len == 6 && memcmp(req.path, "/stats", 6) == 0) {
		rdx_hook_stats s;
		char body[256];
		rdx_hook_get_stats(request_hook, &s);
		snprintf(body, sizeof body,
			 "requests %llu runs %llu failures %llu errors %llu deopts %llu\n",
			 (unsigned long long)atomic_load(&request_count), (unsigned long long)s.runs,
			 (unsigned long long)s.failures, (unsigned long long)s.errors,
			 (unsigned long long)s.deopts);
		reply(fd, 200, body);
	} else {
		reply(fd, 404, "not found\n");
	}
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(listen_fd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		serve(fd);
		close(fd);
	}
}

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *data = NULL;
	size_t cap = 0, n = 0, got;
	do {
		if (n == cap) {
			uint8_t *grown = realloc(data, cap = cap ? cap * 2 : 4096);
			if (!grown) {
				free(data);
				fclose(f);
				return NULL;
			}
			data = grown;
		}
		got = fread(data + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	fclose(f);
	*len = n;
	return data;
}

static int check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "c-host: %s: %s\n", what, rdx_last_error());
		exit(1);
	}
	return rc;
}

int main(int argc, char **argv)
{
	int port = 0, threads = 4;
	rdx_options opts;
	memset(&opts, 0, sizeof opts);
	opts.scratch_size = 1 << 20;
	opts.code_size = 1 << 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--port") && i + 1 < argc) {
			port = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			threads = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
			opts.path = argv[++i];
		} else if (!strcmp(argv[i], "--eim") && i + 1 < argc) {
			opts.eim = read_file(argv[++i], &opts.eim_len);
			if (!opts.eim) {
				fprintf(stderr, "c-host: cannot read %s: %s\n", argv[i], strerror(errno));
				return 1;
			}
		} else {
			fprintf(stderr, "usage: %s [--port N] [--threads N] [--path REGION] [--eim SPEC]\n", argv[0]);
			return 2;
		}
	}
	if (threads < 1 || threads > 64)
		threads = 4;

	/* Block the stop signals in every thread; main waits for them with sigwait. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	rdx_runtime *rt;
	check(rdx_init(&opts, &rt), "rdx_init");
	check(rdx_declare_hook(rt, "http_request", sizeof(struct http_request), 0, &request_hook),
	      "declaring http_request");
	check(rdx_register_function(rt, "get_time", 1001, host_get_time), "exporting get_time");
	check(rdx_register_function(rt, "log", 1002, host_log), "exporting log");
	check(rdx_register_function(rt, "request_count", 2001, host_request_count),
	      "exporting request_count");
	check(rdx_register_variable(rt, "request_count", (void *)&request_count, sizeof request_count),
	      "exporting request_count");
	check(rdx_register(rt, 0), "rdx_register");

	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof addr;
	if (bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(listen_fd, 128) < 0 ||
	    getsockname(listen_fd, (struct sockaddr *)&addr, &alen) < 0) {
		perror("c-host: listen");
		return 1;
	}
	printf("region %s\nlistening %u\n", rdx_region_path(rt), ntohs(addr.sin_port));
	fflush(stdout);

	for (int i = 0; i < threads; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, worker, NULL) != 0) {
			perror("c-host: pthread_create");
			return 1;
		}
		pthread_detach(t);
	}
	int sig;
	sigwait(&stop, &sig);
	shutdown(listen_fd, SHUT_RDWR);
	int rc = rdx_teardown(rt, 100, 1);
	fprintf(stderr, "c-host: stopped (signal %d, teardown %d)\n", sig, rc);
	return 0;
}
