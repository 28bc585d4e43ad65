/*
 * rdx JIT test harness: runs linked native code the way a data plane does, on a machine (or
 * under an emulator) of the code's architecture. Built for aarch64 by the rdx-jit tests with
 * aarch64-linux-gnu-gcc -static and run under qemu-aarch64.
 *
 * Protocol (see docs/jit.md):
 *   rdx_harness symbols      prints one "<symbol> 0x<address>" line per symbol it exports
 *                            (the helpers, the helper table and an 8-entry array map); the
 *                            test links against them.
 *   rdx_harness run FILE     runs every job of FILE and prints "<name> 0x<r0> <status> <pc>"
 *                            (<pc>: the deoptimisation slot an elite artifact stored, else 0).
 *
 * FILE (little-endian): "RDXH", u32 job count, then per job:
 *   u16 name length, name bytes, u64 load address, u32 code length, u32 entry offset,
 *   code bytes, u32 memory length (0xffffffff: no memory, r1 = r2 = 0), memory bytes,
 *   u64 instruction budget.
 * Code is mapped read+write at its load address, written, then switched to read+execute
 * (never both), and the instruction cache is synchronised before the call.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct run_state {
    uint64_t budget;
    uint32_t status;
    uint32_t reserved;
    void *env;
};

/* Big enough for rdx_region::abi::DeoptRunState (a run_state followed by the deoptimisation
 * hand-over area, 4544 bytes), which elite artifacts take as their run state; generic code
 * only touches the leading run_state. */
union run_area {
    struct run_state run;
    unsigned char bytes[4608];
} __attribute__((aligned(16)));

static union run_area area;

typedef uint64_t (*entry_fn)(void *ctx, struct run_state *run, uint64_t len);
typedef uint64_t (*helper_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

/* Helper 5 of the conformance suite ("unwind"): returns its first argument. */
static uint64_t helper_unwind(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
    (void)b; (void)c; (void)d; (void)e;
    return a;
}

/* A helper with a result that depends on every argument, to check the calling convention. */
static uint64_t helper_mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
    return a * 10000 + b * 1000 + c * 100 + d * 10 + e;
}

/* Helper 12 as the host's bpf_tail_call behaves towards generated code: index 0 succeeds (the
 * host ran the target to the end of the run and set the status to TailCalled, 4), any other
 * index fails with -ENOENT and the program goes on. */
static uint64_t helper_tail_call(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
    (void)a; (void)b; (void)d; (void)e;
    if (c != 0)
        return (uint64_t)-2;
    area.run.status = 4;
    return 0;
}

#define TABLE_LEN 16
static helper_fn helper_table[TABLE_LEN];

/* An array map for inlined lookups (map 0): 8 values of 8 bytes, value i = 3 * i + 1. Inlined
 * code reads mapvalue:0 + 8 * key and never calls a helper; map:0, the map object the
 * program loads into r1, is only an address to it. */
#define ARRAY_ENTRIES 8
static uint64_t array_values[ARRAY_ENTRIES];
static uint64_t array_object[4];

static void init_table(void)
{
    helper_table[5] = helper_unwind;
    helper_table[9] = helper_mix;
    helper_table[12] = helper_tail_call;
    for (int i = 0; i < ARRAY_ENTRIES; i++)
        array_values[i] = 3 * (uint64_t)i + 1;
}

static int print_symbols(void)
{
    init_table();
    printf("helper:5 0x%" PRIxPTR "\n", (uintptr_t)helper_unwind);
    printf("helper:9 0x%" PRIxPTR "\n", (uintptr_t)helper_mix);
    printf("helper:12 0x%" PRIxPTR "\n", (uintptr_t)helper_tail_call);
    printf("var:rdx_helper_table 0x%" PRIxPTR "\n", (uintptr_t)helper_table);
    printf("map:0 0x%" PRIxPTR "\n", (uintptr_t)array_object);
    printf("mapvalue:0 0x%" PRIxPTR "\n", (uintptr_t)array_values);
    return 0;
}

static unsigned char *buf;
static size_t buf_len, pos;

static int take(void *out, size_t n)
{
    if (pos + n > buf_len)
        return -1;
    memcpy(out, buf + pos, n);
    pos += n;
    return 0;
}

static int run_jobs(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    buf_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(buf_len);
    if (!buf || fread(buf, 1, buf_len, f) != buf_len) {
        fprintf(stderr, "cannot read %s\n", path);
        return 2;
    }
    fclose(f);
    init_table();

    char magic[4];
    uint32_t count;
    if (take(magic, 4) || memcmp(magic, "RDXH", 4) || take(&count, 4)) {
        fprintf(stderr, "bad job file\n");
        return 2;
    }
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t j = 0; j < count; j++) {
        uint16_t name_len;
        char name[256];
        uint64_t load, budget;
        uint32_t code_len, entry, mem_len;
        if (take(&name_len, 2) || name_len > 255 || take(name, name_len))
            goto truncated;
        name[name_len] = 0;
        if (take(&load, 8) || take(&code_len, 4) || take(&entry, 4))
            goto truncated;
        if (entry >= code_len || pos + code_len > buf_len)
            goto truncated;
        size_t map_len = ((size_t)code_len + page - 1) / page * page;
        void *code = mmap((void *)(uintptr_t)load, map_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (code == MAP_FAILED || (uintptr_t)code != load) {
            fprintf(stderr, "%s: cannot map code at 0x%" PRIx64 "\n", name, load);
            return 2;
        }
        take(code, code_len);
        if (mprotect(code, map_len, PROT_READ | PROT_EXEC)) {
            perror("mprotect");
            return 2;
        }
        __builtin___clear_cache((char *)code, (char *)code + code_len);

        if (take(&mem_len, 4))
            goto truncated;
        unsigned char *mem = NULL;
        uint64_t len = 0;
        if (mem_len != 0xffffffffu) {
            mem = malloc(mem_len ? mem_len : 1);
            if (!mem || take(mem, mem_len))
                goto truncated;
            len = mem_len;
        }
        if (take(&budget, 8))
            goto truncated;
        memset(&area, 0, sizeof area);
        area.run.budget = budget;
        entry_fn fn = (entry_fn)((unsigned char *)code + entry);
        uint64_t r0 = fn(mem, &area.run, len);
        uint32_t pc;
        memcpy(&pc, area.bytes + 24, sizeof pc);
        printf("%s 0x%" PRIx64 " %u %u\n", name, r0, area.run.status, pc);
        free(mem);
        munmap(code, map_len);
    }
    return 0;
truncated:
    fprintf(stderr, "job file truncated\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "symbols"))
        return print_symbols();
    if (argc == 3 && !strcmp(argv[1], "run"))
        return run_jobs(argv[2]);
    fprintf(stderr, "usage: %s symbols | run FILE\n", argv[0]);
    return 2;
}
