/* Baseline for the runtime's hook benchmark: the trivial eBPF program attached as a kernel
 * uprobe to the same function the rdx hook wraps. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int trivial(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
