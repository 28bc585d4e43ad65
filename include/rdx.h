/*
 * rdx.h — the C ABI of the rdx data-plane runtime (crate rdx-runtime-c, built as
 * librdx_runtime_c.so and librdx_runtime_c.a).
 *
 * A host creates its region (rdx_init), declares hooks, exports functions and variables,
 * exposes the region (rdx_register) and calls rdx_run_hook at its hook points. Extension code
 * arrives from a control plane through the region; the host never loads anything.
 *
 * Serving across hosts: when the library is built with the rdx-runtime-c `fabric` cargo
 * feature (cargo build -p rdx-runtime-c --features fabric; link the host with -lfabric),
 * rdx_register also serves the region over libfabric if RDX_FABRIC_LISTEN is set (see
 * docs/fabric.md for RDX_FABRIC_TOKEN_FILE and the other variables) until rdx_teardown.
 * Built without it, rdx_register fails with -ENOTSUP while RDX_FABRIC_LISTEN is set.
 *
 * Every function is thread-safe. Functions returning int return 0 on success or a negative
 * errno; rdx_last_error() then describes the failure for the calling thread.
 */
#ifndef RDX_H
#define RDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RdxRuntime rdx_runtime;
typedef struct RdxHook rdx_hook;

/* A helper or host function as extension code calls it: five 64-bit arguments (r1..r5),
 * one 64-bit result (r0). */
typedef uint64_t (*rdx_helper_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

/* Options for rdx_init; zero fields take defaults. */
typedef struct rdx_options {
	const char *path;         /* region file; NULL = fresh /dev/shm/rdx-<pid>-<random> */
	const uint8_t *eim;       /* EIM spec bytes stored in the region (may be NULL) */
	size_t eim_len;
	uint32_t max_hooks;       /* default 64 */
	uint32_t thread_slots;    /* threads that run hooks; default 64 */
	uint64_t code_size;       /* code arena bytes; default 8 MiB */
	uint64_t scratch_size;    /* XState scratchpad bytes; default 16 MiB */
	uint64_t hold_timeout_ns; /* longest wait on a held hook; default 10 ms */
} rdx_options;

/* Counters of one hook, summed over threads. */
typedef struct rdx_hook_stats {
	uint64_t runs;          /* runs of extension code */
	uint64_t failures;      /* runs stopped (instruction budget spent, failed helper, deopt) */
	uint64_t errors;        /* invalid slot contents refused */
	uint64_t hold_timeouts; /* callers that stopped waiting on a held hook */
	uint64_t active;        /* the slot's active word (version << 32 | entry offset) */
	uint64_t deopts;        /* runs of elite code stopped at a failed guard (also failures) */
} rdx_hook_stats;

/* ctx_init: creates and maps the region. */
int rdx_init(const rdx_options *opts, rdx_runtime **out);
/* The region file path (owned by the runtime). */
const char *rdx_region_path(const rdx_runtime *rt);
/* ctx_register: exposes the region to control planes (file mode; 0 = 0600). With the
 * `fabric` feature and RDX_FABRIC_LISTEN set, also serves it over the fabric (a failure to
 * serve is an error with rdx_last_error() saying why); calling it again keeps that server. */
int rdx_register(const rdx_runtime *rt, uint32_t mode);
/* The fabric bootstrap address ("IP:PORT") the region is served on, or NULL when it is not
 * served over the fabric. Owned by the runtime. */
const char *rdx_fabric_address(const rdx_runtime *rt);
/* Declares a hook whose context is context_size bytes; default_return is returned while
 * nothing is attached. */
int rdx_declare_hook(const rdx_runtime *rt, const char *name, uint64_t context_size,
		     uint64_t default_return, rdx_hook **out);
/* Runs a hook: the attached program's r0, or the default. One load and a branch when empty. */
uint64_t rdx_run_hook(const rdx_hook *hook, void *ctx);
/* Exports a host function under helper id `id` (extensions call it as helper `id`). */
int rdx_register_function(const rdx_runtime *rt, const char *name, uint32_t id, rdx_helper_fn func);
/* Exports a host variable of `size` bytes at `addr` (must live as long as the process). */
int rdx_register_variable(const rdx_runtime *rt, const char *name, void *addr, uint64_t size);
int rdx_hook_get_stats(const rdx_hook *hook, rdx_hook_stats *out);
void rdx_hook_free(rdx_hook *hook);
/* ctx_teardown: stops serving over the fabric; hooks stop running extensions; waits up to
 * wait_ms for threads inside them; removes the region file if `unlink`; frees `rt`.
 * Returns 0, 1 if the wait timed out, or a negative errno. Hook handles stay valid and return their defaults. */
int rdx_teardown(rdx_runtime *rt, uint32_t wait_ms, int unlink);
/* The calling thread's last error message. */
const char *rdx_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* RDX_H */
