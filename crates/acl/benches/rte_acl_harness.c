/*
 * Five-tuple comparison harness for the ACL benchmark: builds a DPDK rte_acl context from the
 * five-tuple part of the benchmark's rules and classifies the same traffic.
 *
 * Built and run by crates/acl/benches/classify.rs when Debian's librte-acl23 and librte-eal23
 * are installed. The few rte_acl declarations it needs are written out here because the
 * headers ship only in libdpdk-dev; they follow the DPDK 22.11 ABI of rte_acl.h.
 *
 * Usage: rte_acl_harness RULES PACKETS CHECK_COUNT
 *   RULES:   u32 n, then n x { u32 sip, u32 sip_len, u32 dip, u32 dip_len,
 *            u16 sport_lo, u16 sport_hi, u16 dport_lo, u16 dport_hi } (host order)
 *   PACKETS: u32 n, then n x 16-byte keys { u8 proto, u8 pad[3], be32 sip, be32 dip,
 *            be16 sport, be16 dport }
 * Prints "build_ms", "burst_mpps", "single_mpps", "p50_ns", "p99_ns" lines, then the matched
 * rule index (or -1) of the first CHECK_COUNT packets, one per line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RTE_ACL_MAX_FIELDS 64
#define RTE_ACL_FIELD_TYPE_MASK 0
#define RTE_ACL_FIELD_TYPE_RANGE 1
#define RTE_ACL_FIELD_TYPE_BITMASK 2

struct rte_acl_ctx;

struct rte_acl_param {
    const char *name;
    int socket_id;
    uint32_t rule_size;
    uint32_t max_rule_num;
};

struct rte_acl_field_def {
    uint8_t type;
    uint8_t size;
    uint8_t field_index;
    uint8_t input_index;
    uint32_t offset;
};

struct rte_acl_config {
    uint32_t num_categories;
    uint32_t num_fields;
    struct rte_acl_field_def defs[RTE_ACL_MAX_FIELDS];
    size_t max_size;
};

union rte_acl_field_types {
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
};

struct rte_acl_field {
    union rte_acl_field_types value;
    union rte_acl_field_types mask_range;
};

struct rte_acl_rule_data {
    uint32_t category_mask;
    int32_t priority;
    uint32_t userdata;
};

#define NUM_FIELDS 5
struct five_tuple_rule {
    struct rte_acl_rule_data data;
    struct rte_acl_field field[NUM_FIELDS];
};

int rte_eal_init(int argc, char **argv);
struct rte_acl_ctx *rte_acl_create(const struct rte_acl_param *param);
int rte_acl_add_rules(struct rte_acl_ctx *ctx, const void *rules, uint32_t num);
int rte_acl_build(struct rte_acl_ctx *ctx, const struct rte_acl_config *cfg);
int rte_acl_classify(const struct rte_acl_ctx *ctx, const uint8_t **data, uint32_t *results,
                     uint32_t num, uint32_t categories);
void rte_acl_free(struct rte_acl_ctx *ctx);

struct packet {
    uint8_t proto;
    uint8_t pad[3];
    uint32_t sip;
    uint32_t dip;
    uint16_t sport;
    uint16_t dport;
};

struct rule_in {
    uint32_t sip, sip_len, dip, dip_len;
    uint16_t sport_lo, sport_hi, dport_lo, dport_hi;
};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *slurp(const char *path, uint32_t *count, size_t item) {
    FILE *f = fopen(path, "rb");
    if (!f || fread(count, 4, 1, f) != 1) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    void *buf = malloc((size_t)*count * item + 1);
    if (fread(buf, item, *count, f) != *count) {
        fprintf(stderr, "short read in %s\n", path);
        exit(2);
    }
    fclose(f);
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s RULES PACKETS CHECK_COUNT\n", argv[0]);
        return 2;
    }
    char *eal_argv[] = {"rte_acl_harness", "--no-huge", "-m", "2048", "--no-pci", "--no-shconf",
                        "-l", "0", "--log-level", "lib.eal:error", NULL};
    if (rte_eal_init(10, eal_argv) < 0) {
        fprintf(stderr, "rte_eal_init failed\n");
        return 3;
    }
    uint32_t n_rules, n_pkts;
    struct rule_in *rin = slurp(argv[1], &n_rules, sizeof(struct rule_in));
    struct packet *pkts = slurp(argv[2], &n_pkts, sizeof(struct packet));
    uint32_t check = (uint32_t)atoi(argv[3]);

    struct rte_acl_param param = {"rdx_bench", 0, sizeof(struct five_tuple_rule), n_rules};
    struct rte_acl_ctx *ctx = rte_acl_create(&param);
    if (!ctx) {
        fprintf(stderr, "rte_acl_create failed\n");
        return 3;
    }
    struct five_tuple_rule *rules = calloc(n_rules, sizeof(*rules));
    for (uint32_t i = 0; i < n_rules; i++) {
        struct five_tuple_rule *r = &rules[i];
        r->data.category_mask = 1;
        /* rte_acl: the highest priority wins; ours: the lowest index. */
        r->data.priority = (int32_t)(n_rules - i);
        r->data.userdata = i + 1;
        r->field[0].value.u8 = 17;
        r->field[0].mask_range.u8 = 0xff;
        r->field[1].value.u32 = rin[i].sip;
        r->field[1].mask_range.u32 = rin[i].sip_len;
        r->field[2].value.u32 = rin[i].dip;
        r->field[2].mask_range.u32 = rin[i].dip_len;
        r->field[3].value.u16 = rin[i].sport_lo;
        r->field[3].mask_range.u16 = rin[i].sport_hi;
        r->field[4].value.u16 = rin[i].dport_lo;
        r->field[4].mask_range.u16 = rin[i].dport_hi;
    }
    struct rte_acl_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.num_categories = 1;
    cfg.num_fields = NUM_FIELDS;
    cfg.defs[0] = (struct rte_acl_field_def){RTE_ACL_FIELD_TYPE_BITMASK, 1, 0, 0, 0};
    cfg.defs[1] = (struct rte_acl_field_def){RTE_ACL_FIELD_TYPE_MASK, 4, 1, 1, 4};
    cfg.defs[2] = (struct rte_acl_field_def){RTE_ACL_FIELD_TYPE_MASK, 4, 2, 2, 8};
    cfg.defs[3] = (struct rte_acl_field_def){RTE_ACL_FIELD_TYPE_RANGE, 2, 3, 3, 12};
    cfg.defs[4] = (struct rte_acl_field_def){RTE_ACL_FIELD_TYPE_RANGE, 2, 4, 3, 14};

    double t0 = now_ns();
    if (rte_acl_add_rules(ctx, rules, n_rules) != 0) {
        fprintf(stderr, "rte_acl_add_rules failed\n");
        return 3;
    }
    int rc = rte_acl_build(ctx, &cfg);
    if (rc != 0) {
        fprintf(stderr, "rte_acl_build failed: %d\n", rc);
        return 3;
    }
    printf("build_ms %.1f\n", (now_ns() - t0) / 1e6);

    const uint8_t **ptrs = malloc(sizeof(*ptrs) * n_pkts);
    uint32_t *results = malloc(sizeof(*results) * n_pkts);
    for (uint32_t i = 0; i < n_pkts; i++)
        ptrs[i] = (const uint8_t *)&pkts[i];

    /* Best of three passes, as the Rust side measures: the machine is shared. */
    const uint32_t burst = 64;
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        double c0 = thread_ns();
        for (uint32_t i = 0; i < n_pkts; i += burst) {
            uint32_t k = n_pkts - i < burst ? n_pkts - i : burst;
            rte_acl_classify(ctx, ptrs + i, results + i, k, 1);
        }
        double t = thread_ns() - c0;
        if (pass == 0 || t < best)
            best = t;
    }
    printf("burst_mpps %.3f\n", n_pkts / (best / 1e3));

    for (int pass = 0; pass < 3; pass++) {
        double c0 = thread_ns();
        for (uint32_t i = 0; i < n_pkts; i++)
            rte_acl_classify(ctx, ptrs + i, results + i, 1, 1);
        double t = thread_ns() - c0;
        if (pass == 0 || t < best)
            best = t;
    }
    printf("single_mpps %.3f\n", n_pkts / (best / 1e3));

    uint32_t n_lat = n_pkts < 100000 ? n_pkts : 100000;
    double *lat = malloc(sizeof(double) * n_lat);
    for (uint32_t i = 0; i < n_lat; i++) {
        double a = now_ns();
        rte_acl_classify(ctx, ptrs + i, results + i, 1, 1);
        lat[i] = now_ns() - a;
    }
    qsort(lat, n_lat, sizeof(double), cmp_double);
    printf("p50_ns %.0f\np99_ns %.0f\n", lat[n_lat / 2], lat[(uint32_t)(n_lat * 0.99)]);

    for (uint32_t i = 0; i < check && i < n_pkts; i++)
        printf("%d\n", (int)results[i] - 1);
    rte_acl_free(ctx);
    return 0;
}
