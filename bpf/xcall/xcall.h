/* Cross-sandbox calls from eBPF C (see docs/xcall.md).
 *
 * Caller side: a class holds one function capability per (service, entry), a host function id
 * bound to the `call` helper whose first argument must be that entry's target value:
 *   XCALL_TARGET(slot, export) = 0x5843 << 48 | slot << 16 | export
 * It returns the callee's r0 (>= 0) or a negative errno (-ENXIO service not mapped, -ENOENT not
 * exported, -ESRCH nothing deployed, -E2BIG arguments too large, -ETIME callee out of budget,
 * -EFAULT callee failed, -EBUSY serialised entry busy, -EAGAIN no thread slot).
 *
 * Callee side: the context is the caller's argument buffer, read-only; results go into the
 * caller's output buffer through xcall_reply(data, len), which returns len or a negative errno. */
#pragma once
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define XCALL_TARGET(slot, export) ((0x5843ULL << 48) | ((__u64)(slot) << 16) | (__u64)(export))

#define XCALL_REPLY_ID 1900
static long (*xcall_reply)(const void *data, __u32 len) = (void *)XCALL_REPLY_ID;

/* Declares `name` as the call capability bound to host function `id`. */
#define XCALL_CAPABILITY(name, id)                                                             \
	static long (*name)(__u64 target, const void *args, __u32 args_len, void *out,         \
			    __u32 out_len) = (void *)(id)
