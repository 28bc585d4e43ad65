/*
 * rdx-fabric's shim over libfabric. libfabric's data-path calls (fi_read, fi_write,
 * fi_compare_atomic, fi_cq_read, ...) are static inline wrappers over per-object operation
 * tables, so Rust cannot link against them; this file turns the few rdx uses into real
 * functions and keeps every libfabric structure on the C side. The Rust side sees one
 * opaque `struct rdxf_node` and plain integers.
 *
 * libfabric itself is loaded with dlopen the first time an endpoint is opened, not linked:
 * its providers' library constructors (PSM's among them) sleep for about 0.2 s when a
 * process starts, and every `rdx` command and every host linking the runtime would pay that
 * although only fabric:// addresses use libfabric. The exported functions the shim needs
 * are reached through pointers (`lib`); everything else in libfabric's API is inline calls
 * through per-object operation tables, which need no symbol.
 */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rdxf_node {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

/* What rdxf_open chose, for the Rust side to adapt to. */
struct rdxf_props {
	char provider[64];
	uint64_t mr_mode;
	uint64_t max_msg_size;
	uint64_t tx_depth;
	uint32_t manual_progress; /* the target must call into libfabric for data to land */
	uint32_t context_size;    /* bytes the caller must reserve per operation context */
	uint32_t virt_addr;       /* remote addresses are target virtual addresses */
	uint32_t prov_key;        /* the provider picks MR keys */
};

/* The libfabric ABI this shim is compiled against: its headers' current symbol versions are
 * what dlsym returns by default from libfabric.so.1. */
static struct {
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_error[256];

static void *resolve(void *handle, const char *name)
{
	void *f = dlsym(handle, name);

	if (!f && !lib_error[0])
		snprintf(lib_error, sizeof(lib_error), "libfabric.so.1 has no %s", name);
	return f;
}

static void load_lib(void)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		const char *e = dlerror();
		snprintf(lib_error, sizeof(lib_error), "cannot load libfabric: %s",
			 e ? e : "unknown error");
		return;
	}
	lib.getinfo = resolve(h, "fi_getinfo");
	lib.freeinfo = resolve(h, "fi_freeinfo");
	lib.dupinfo = resolve(h, "fi_dupinfo");
	lib.fabric = resolve(h, "fi_fabric");
	lib.strerror = resolve(h, "fi_strerror");
}

/* Loads libfabric once; 0, or -FI_ENOSYS with rdxf_load_error() saying why. */
int rdxf_load(void)
{
	pthread_once(&lib_once, load_lib);
	return lib_error[0] ? -FI_ENOSYS : 0;
}

const char *rdxf_load_error(void) { return lib_error; }

/* Whether this process has loaded libfabric (tests check that plain commands do not). */
int rdxf_loaded(void) { return lib.getinfo != NULL; }

const char *rdxf_strerror(int err)
{
	if (rdxf_load() != 0)
		return lib_error;
	return lib.strerror(err < 0 ? -err : err);
}

static void close_fid(struct fid *fid)
{
	if (fid)
		fi_close(fid);
}

void rdxf_close(struct rdxf_node *n)
{
	if (!n)
		return;
	close_fid(n->ep ? &n->ep->fid : NULL);
	close_fid(n->av ? &n->av->fid : NULL);
	close_fid(n->cq ? &n->cq->fid : NULL);
	close_fid(n->domain ? &n->domain->fid : NULL);
	close_fid(n->fabric ? &n->fabric->fid : NULL);
	if (n->info)
		lib.freeinfo(n->info);
	free(n);
}

static int getinfo(const char *prov, const char *node, const char *service, int listen,
		   uint64_t mr_mode, struct fi_info **out)
{
	struct fi_info *hints = lib.dupinfo(NULL);
	int rc;

	if (!hints)
		return -FI_ENOMEM;
	hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ |
		      FI_REMOTE_WRITE;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = mr_mode;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	/* A completion means the data is in the target's memory, so a write completed before
	 * a compare-and-swap is issued is visible before the swap (publication order). */
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	if (prov && *prov)
		hints->fabric_attr->prov_name = strdup(prov);
	rc = lib.getinfo(FI_VERSION(1, 9), node, service, listen ? FI_SOURCE : 0, hints, out);
	lib.freeinfo(hints);
	return rc;
}

/*
 * Opens an RDM endpoint with RMA and atomics. `prov` may be NULL (libfabric's choice,
 * which honours FI_PROVIDER). `listen` binds to `node`:`service` (the target side).
 */
int rdxf_open(const char *prov, const char *node, const char *service, int listen,
	      struct rdxf_node **out, struct rdxf_props *props)
{
	const uint64_t base_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_ENDPOINT;
	struct rdxf_node *n = calloc(1, sizeof(*n));
	struct fi_cq_attr cq_attr = {0};
	struct fi_av_attr av_attr = {0};
	struct fi_atomic_attr atomic_attr;
	int rc;

	if (!n)
		return -FI_ENOMEM;
	rc = rdxf_load();
	if (rc) {
		free(n);
		return rc;
	}
	/* Caller-chosen (random) keys first; providers that only hand out their own keys
	 * (verbs) are accepted on the second try. */
	rc = getinfo(prov, node, service, listen, base_mode, &n->info);
	if (rc == -FI_ENODATA)
		rc = getinfo(prov, node, service, listen, base_mode | FI_MR_PROV_KEY, &n->info);
	if (rc)
		goto fail;
	rc = lib.fabric(n->info->fabric_attr, &n->fabric, NULL);
	if (rc)
		goto fail;
	rc = fi_domain(n->fabric, n->info, &n->domain, NULL);
	if (rc)
		goto fail;
	rc = fi_query_atomic(n->domain, FI_UINT64, FI_CSWAP, &atomic_attr, FI_COMPARE_ATOMIC);
	if (!rc)
		rc = fi_query_atomic(n->domain, FI_UINT64, FI_SUM, &atomic_attr, FI_FETCH_ATOMIC);
	if (rc)
		goto fail;
	cq_attr.format = FI_CQ_FORMAT_CONTEXT;
	cq_attr.size = n->info->tx_attr->size ? n->info->tx_attr->size : 256;
	rc = fi_cq_open(n->domain, &cq_attr, &n->cq, NULL);
	if (rc)
		goto fail;
	av_attr.type = FI_AV_UNSPEC;
	rc = fi_av_open(n->domain, &av_attr, &n->av, NULL);
	if (rc)
		goto fail;
	rc = fi_endpoint(n->domain, n->info, &n->ep, NULL);
	if (rc)
		goto fail;
	rc = fi_ep_bind(n->ep, &n->av->fid, 0);
	if (!rc)
		rc = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(n->ep);
	if (rc)
		goto fail;

	memset(props, 0, sizeof(*props));
	snprintf(props->provider, sizeof(props->provider), "%s", n->info->fabric_attr->prov_name);
	props->mr_mode = n->info->domain_attr->mr_mode;
	props->max_msg_size = n->info->ep_attr->max_msg_size;
	props->tx_depth = n->info->tx_attr->size;
	props->manual_progress = n->info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
	props->context_size = sizeof(struct fi_context2);
	props->virt_addr = !!(props->mr_mode & FI_MR_VIRT_ADDR);
	props->prov_key = !!(props->mr_mode & FI_MR_PROV_KEY);
	*out = n;
	return 0;
fail:
	rdxf_close(n);
	return rc < 0 ? rc : -rc;
}

int rdxf_getname(struct rdxf_node *n, void *buf, size_t *len)
{
	return fi_getname(&n->ep->fid, buf, len);
}

int rdxf_av_insert(struct rdxf_node *n, const void *addr, uint64_t *fi_addr)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int rc = fi_av_insert(n->av, addr, 1, &a, 0, NULL);

	if (rc != 1)
		return rc < 0 ? rc : -FI_EADDRNOTAVAIL;
	*fi_addr = a;
	return 0;
}

/* Registers [buf, buf+len): for remote read+write and atomics (`remote`, a served region)
 * or as a local buffer.
 * Returns the key in *key (the requested one, or the provider's) and the local descriptor. */
int rdxf_mr_reg(struct rdxf_node *n, void *buf, size_t len, int remote,
		uint64_t requested_key, struct fid_mr **mr, uint64_t *key, void **desc)
{
	uint64_t access = remote ? FI_REMOTE_READ | FI_REMOTE_WRITE : FI_READ | FI_WRITE;
	int rc = fi_mr_reg(n->domain, buf, len, access, 0, requested_key, 0, mr, NULL);

	if (rc)
		return rc;
	if (n->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		rc = fi_mr_bind(*mr, &n->ep->fid, 0);
		if (!rc)
			rc = fi_mr_enable(*mr);
		if (rc) {
			fi_close(&(*mr)->fid);
			return rc;
		}
	}
	*key = fi_mr_key(*mr);
	*desc = fi_mr_desc(*mr);
	return 0;
}

void rdxf_mr_close(struct fid_mr *mr)
{
	if (mr)
		fi_close(&mr->fid);
}

ssize_t rdxf_read(struct rdxf_node *n, void *buf, size_t len, void *desc, uint64_t dest,
		  uint64_t addr, uint64_t key, void *ctx)
{
	return fi_read(n->ep, buf, len, desc, dest, addr, key, ctx);
}

ssize_t rdxf_write(struct rdxf_node *n, const void *buf, size_t len, void *desc, uint64_t dest,
		   uint64_t addr, uint64_t key, void *ctx)
{
	return fi_write(n->ep, buf, len, desc, dest, addr, key, ctx);
}

ssize_t rdxf_cswap(struct rdxf_node *n, const uint64_t *desired, const uint64_t *compare,
		   uint64_t *result, void *desc, uint64_t dest, uint64_t addr, uint64_t key,
		   void *ctx)
{
	return fi_compare_atomic(n->ep, desired, 1, desc, compare, desc, result, desc, dest,
				 addr, key, FI_UINT64, FI_CSWAP, ctx);
}

ssize_t rdxf_fetch_add(struct rdxf_node *n, const uint64_t *delta, uint64_t *result,
		       void *desc, uint64_t dest, uint64_t addr, uint64_t key, void *ctx)
{
	return fi_fetch_atomic(n->ep, delta, 1, desc, result, desc, dest, addr, key, FI_UINT64,
			       FI_SUM, ctx);
}

/*
 * Reads up to `max` completions into `ctxs`. Returns how many, 0 when none is ready, or a
 * negative error; on an error completion, its context goes to *err_ctx and a description
 * (provider's words) to `msg`.
 */
ssize_t rdxf_cq_read(struct rdxf_node *n, void **ctxs, size_t max, void **err_ctx, char *msg,
		     size_t msg_len)
{
	struct fi_cq_entry entries[16];
	ssize_t rc;
	size_t i;

	if (max > 16)
		max = 16;
	rc = fi_cq_read(n->cq, entries, max);
	if (rc == -FI_EAGAIN)
		return 0;
	if (rc == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};

		if (fi_cq_readerr(n->cq, &e, 0) > 0) {
			*err_ctx = e.op_context;
			snprintf(msg, msg_len, "%s (provider: %s)", lib.strerror(e.err),
				 fi_cq_strerror(n->cq, e.prov_errno, e.err_data, NULL, 0));
			return e.err ? -(ssize_t)e.err : -FI_EOTHER;
		}
		return -FI_EOTHER;
	}
	if (rc < 0)
		return rc;
	for (i = 0; i < (size_t)rc; i++)
		ctxs[i] = entries[i].op_context;
	return rc;
}
