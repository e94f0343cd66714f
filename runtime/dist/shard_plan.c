/* Sharded parameters: the plan, the schedule, and shard <-> whole tensor copies (shard_plan.h).
 * Pure functions of the parameter list and the rank count: every rank computes the same plan,
 * and a checkpoint written by N ranks in the per-name format is cut again for M. */
#include "runtime/dist/shard_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_BYTES 16 /* one vector load; NCCL and the copy kernels like their pieces aligned */
#define OUTSIDE_BEFORE "(before the layers)"
#define OUTSIDE_AFTER "(after the layers)"

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* indices of dim per granule: outer*g*inner elements a multiple of the vector in both the
 * float32 master and the gathered element (block scaling: whole 128-index blocks too).
 * A slice's elements are outer*shard*inner, but its pieces are outer runs of shard*inner: the
 * granule keeps each run aligned. */
static int64_t granule(const fr_shard_param *q)
{
    const int64_t need = ALIGN_BYTES / (q->gather_bytes < 4 ? q->gather_bytes : 4); /* elements */
    int64_t g = need / gcd64(need, q->inner > 0 ? q->inner : need);
    if (q->block) g = g * q->block / gcd64(g, q->block);
    return g;
}

/* where the module path of a name starts: a fused group "fused(a,b,c)" is its first member's */
static const char *module_path(const char *name)
{
    const char *open = strchr(name, '(');
    return open && strncmp(name, "fused(", 6) == 0 ? open + 1 : name;
}

/* the layer a name belongs to: up to and including the first ".<digits>" followed by "." or
 * the end (of module_path(name)); 0 when none */
static size_t layer_prefix(const char *name)
{
    for (const char *p = strchr(name, '.'); p && !strchr(",)", *p); p = strchr(p + 1, '.')) {
        const char *d = p + 1;
        while (*d >= '0' && *d <= '9') d++;
        if (d > p + 1 && (*d == '.' || *d == '\0')) return (size_t)(d - name);
    }
    return 0;
}

static fr_status add_unit(fr_shard_plan *p, const char *name, size_t len)
{
    fr_shard_unit *u = &p->units[p->n_units];
    u->name = fr_malloc(len + 1, "shard plan");
    if (!u->name) return FR_ERR_OOM;
    memcpy(u->name, name, len);
    u->name[len] = '\0';
    p->n_units++;
    return FR_OK;
}

/* units in order of first appearance; the parameters outside the layers go to one unit before
 * them (those met before any layer) and one after, except a name with no module path, which
 * follows the parameter before it */
static fr_status assign_units(fr_shard_plan *p)
{
    int before = -1, after = -1, seen_layer = 0;
    for (int i = 0; i < p->n_params; i++) {
        fr_shard_param *q = &p->params[i];
        const char *path = module_path(q->name);
        size_t len = layer_prefix(path);
        int u = -1;
        if (len) {
            seen_layer = 1;
            for (int k = 0; k < p->n_units && u < 0; k++)
                if (strlen(p->units[k].name) == len && strncmp(p->units[k].name, path, len) == 0) u = k;
            if (u < 0) {
                FR_TRY(add_unit(p, path, len));
                u = p->n_units - 1;
            }
        } else if (seen_layer && i > 0 && !strchr(path, '.')) {
            /* no module path at all (a TorchScript export's onnx::MatMul_576, a fused group): it
               belongs with the parameter before it, in the model's order */
            u = p->params[i - 1].unit;
        } else if (!seen_layer) {
            if (before < 0) {
                FR_TRY(add_unit(p, OUTSIDE_BEFORE, strlen(OUTSIDE_BEFORE)));
                before = p->n_units - 1;
            }
            u = before;
        } else {
            if (after < 0) {
                FR_TRY(add_unit(p, OUTSIDE_AFTER, strlen(OUTSIDE_AFTER)));
                after = p->n_units - 1;
            }
            u = after;
        }
        q->unit = u;
    }
    /* the unit after the layers runs last: move it to the end of the order */
    if (after >= 0 && after != p->n_units - 1) {
        fr_shard_unit keep = p->units[after];
        memmove(&p->units[after], &p->units[after + 1], (size_t)(p->n_units - 1 - after) * sizeof *p->units);
        p->units[p->n_units - 1] = keep;
        for (int i = 0; i < p->n_params; i++) {
            int *u = &p->params[i].unit;
            *u = *u == after ? p->n_units - 1 : *u > after ? *u - 1 : *u;
        }
    }
    return FR_OK;
}

/* the schedule, and the most gathered bytes held at once along it */
static void schedule(fr_shard_plan *p)
{
    const int U = p->n_units;
    int n = 0;
    fr_shard_step *s = p->steps;
    if (U > 0) s[n++] = (fr_shard_step){FR_SHARD_GATHER, 0};
    for (int u = 0; u < U; u++) {
        if (u + 1 < U) s[n++] = (fr_shard_step){FR_SHARD_GATHER, u + 1}; /* prefetch under u's compute */
        s[n++] = (fr_shard_step){FR_SHARD_FORWARD, u};
        if (u + 1 < U) s[n++] = (fr_shard_step){FR_SHARD_FREE, u};   /* the last stays for the backward */
    }
    for (int u = U - 1; u >= 0; u--) {
        if (u - 1 >= 0) s[n++] = (fr_shard_step){FR_SHARD_GATHER, u - 1};
        s[n++] = (fr_shard_step){FR_SHARD_BACKWARD, u};
        s[n++] = (fr_shard_step){FR_SHARD_FREE, u};
        s[n++] = (fr_shard_step){FR_SHARD_REDUCE_SCATTER, u};
    }
    p->n_steps = n;
    size_t held = 0, peak = 0;
    for (int k = 0; k < n; k++) {
        if (s[k].op == FR_SHARD_GATHER) held += p->units[s[k].unit].gather_bytes;
        if (s[k].op == FR_SHARD_FREE) held -= p->units[s[k].unit].gather_bytes;
        if (held > peak) peak = held;
    }
    p->peak_gathered = peak;
}

fr_status fr_shard_plan_new(const fr_shard_spec *specs, int n, int world, fr_shard_plan **out)
{
    *out = NULL;
    if (world < 1 || n < 0) return fr_error(FR_ERR_INVALID_ARG, "shard plan: %d parameters over %d ranks", n, world);
    fr_shard_plan *p = fr_calloc(1, sizeof *p, "shard plan");
    if (!p) return FR_ERR_OOM;
    p->world = world;
    p->params = fr_calloc((size_t)(n ? n : 1), sizeof *p->params, "shard plan");
    p->units = fr_calloc((size_t)(n ? n : 1), sizeof *p->units, "shard plan");
    p->steps = fr_calloc((size_t)(7 * n + 1), sizeof *p->steps, "shard plan");
    fr_status st = p->params && p->units && p->steps ? FR_OK : FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < n; i++) {
        const fr_shard_spec *s = &specs[i];
        fr_shard_param *q = &p->params[i];
        p->n_params = i + 1;
        const char *nm = s->name ? s->name : "(unnamed)";
        if (s->rank < 0 || s->rank > FR_MAX_RANK || (s->rank > 0 && (s->dim < 0 || s->dim >= s->rank)) ||
            (s->rank == 0 && s->dim != 0)) {
            st = fr_error(FR_ERR_INVALID_ARG, "shard plan: parameter '%s': dimension %d of a rank-%d tensor", nm, s->dim,
                          s->rank);
            break;
        }
        if (s->gather_bytes != 1 && s->gather_bytes != 2 && s->gather_bytes != 4) {
            st = fr_error(FR_ERR_INVALID_ARG, "shard plan: parameter '%s': gathered elements of %d bytes (1, 2 or 4)", nm,
                          s->gather_bytes);
            break;
        }
        if (s->block != 0 && s->block != 128) {
            st = fr_error(FR_ERR_INVALID_ARG, "shard plan: parameter '%s': blocks of %d (0 or 128)", nm, s->block);
            break;
        }
        q->name = fr_strdup(nm, "shard plan");
        if (!q->name) {
            st = FR_ERR_OOM;
            break;
        }
        q->rank = s->rank;
        q->dim = s->dim;
        q->gather_bytes = s->gather_bytes;
        q->block = s->block;
        q->numel = q->outer = q->inner = q->extent = 1;
        for (int d = 0; d < s->rank; d++) {
            if (s->dims[d] < 0) {
                st = fr_error(FR_ERR_INVALID_ARG, "shard plan: parameter '%s': dimension %d is %lld", nm, d,
                              (long long)s->dims[d]);
                break;
            }
            q->dims[d] = s->dims[d];
            q->numel *= s->dims[d];
            if (d < s->dim) q->outer *= s->dims[d];
            if (d > s->dim) q->inner *= s->dims[d];
        }
        if (st != FR_OK) break;
        if (s->rank > 0) q->extent = s->dims[s->dim];
        q->granule = granule(q);
        const int64_t per = (q->extent + world - 1) / world;
        q->shard = (per + q->granule - 1) / q->granule * q->granule;
    }
    if (st == FR_OK) st = assign_units(p);
    for (int i = 0; st == FR_OK && i < n; i++) {
        const fr_shard_param *q = &p->params[i];
        fr_shard_unit *u = &p->units[q->unit];
        const size_t all = (size_t)world * (size_t)(q->outer * q->shard * q->inner);
        u->n_params++;
        u->gather_bytes += all * (size_t)q->gather_bytes;
        if (q->block) /* a float32 scale per 128x128 block of the gathered weight */
            u->gather_bytes += (size_t)world * (size_t)(q->shard / 128) * (size_t)((q->outer * q->inner + 127) / 128) * 4;
        u->grad_bytes += (size_t)q->numel * sizeof(float);
    }
    if (st == FR_OK) schedule(p);
    if (st != FR_OK) {
        fr_shard_plan_free(p);
        return st;
    }
    *out = p;
    return FR_OK;
}

void fr_shard_plan_free(fr_shard_plan *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_params; i++) free(p->params[i].name);
    for (int u = 0; u < p->n_units; u++) free(p->units[u].name);
    free(p->params);
    free(p->units);
    free(p->steps);
    free(p);
}

int fr_shard_plan_find(const fr_shard_plan *p, const char *name)
{
    for (int i = 0; i < p->n_params; i++)
        if (strcmp(p->params[i].name, name) == 0) return i;
    return -1;
}

void fr_shard_slice(const fr_shard_plan *p, int i, int rank, int64_t *first, int64_t *count)
{
    const fr_shard_param *q = &p->params[i];
    int64_t a = (int64_t)rank * q->shard, b = a + q->shard;
    if (a > q->extent) a = q->extent;
    if (b > q->extent) b = q->extent;
    *first = a;
    *count = b - a;
}

int64_t fr_shard_alloc_numel(const fr_shard_plan *p, int i)
{
    const fr_shard_param *q = &p->params[i];
    return q->outer * q->shard * q->inner;
}

int64_t fr_shard_owned_numel(const fr_shard_plan *p, int rank)
{
    int64_t s = 0, first, count;
    for (int i = 0; i < p->n_params; i++) {
        fr_shard_slice(p, i, rank, &first, &count);
        s += p->params[i].outer * count * p->params[i].inner;
    }
    return s;
}

int64_t fr_shard_alloc_total(const fr_shard_plan *p)
{
    int64_t s = 0;
    for (int i = 0; i < p->n_params; i++) s += fr_shard_alloc_numel(p, i);
    return s;
}

/* the shard is outer runs of shard*inner elements; run o holds indices [first, first+count)
 * of dim, that is elements [(o*extent + first)*inner, +count*inner) of the whole tensor */
void fr_shard_scatter(const fr_shard_plan *p, int i, int rank, const float *full, float *shard)
{
    const fr_shard_param *q = &p->params[i];
    int64_t first, count;
    fr_shard_slice(p, i, rank, &first, &count);
    const int64_t run = q->shard * q->inner;
    memset(shard, 0, (size_t)(q->outer * run) * sizeof *shard);
    for (int64_t o = 0; o < q->outer; o++)
        memcpy(shard + o * run, full + (o * q->extent + first) * q->inner, (size_t)(count * q->inner) * sizeof *shard);
}

void fr_shard_gather(const fr_shard_plan *p, int i, const float *const *shards, float *full)
{
    const fr_shard_param *q = &p->params[i];
    const int64_t run = q->shard * q->inner;
    for (int r = 0; r < p->world; r++) {
        int64_t first, count;
        fr_shard_slice(p, i, r, &first, &count);
        for (int64_t o = 0; o < q->outer && count > 0; o++)
            memcpy(full + (o * q->extent + first) * q->inner, shards[r] + o * run, (size_t)(count * q->inner) * sizeof *full);
    }
}

char *fr_shard_plan_text(const fr_shard_plan *p)
{
    const double M = 1024.0 * 1024.0;
    size_t cap = 512 + (size_t)p->n_units * 160, k = 0;
    char *s = fr_malloc(cap, "shard plan text");
    if (!s) return NULL;
    int64_t total = 0, lo = -1, hi = 0;
    for (int i = 0; i < p->n_params; i++) total += p->params[i].numel;
    for (int r = 0; r < p->world; r++) {
        int64_t o = fr_shard_owned_numel(p, r);
        if (lo < 0 || o < lo) lo = o;
        if (o > hi) hi = o;
    }
    const int64_t alloc = fr_shard_alloc_total(p);
    k += (size_t)snprintf(s + k, cap - k,
                          "%d parameters (%lld elements) over %d ranks: each rank allocates %lld elements (%.2f%% of "
                          "the whole; owns %lld to %lld)\n%d units, gathered one ahead; peak gathered weights %.1f MiB\n",
                          p->n_params, (long long)total, p->world, (long long)alloc,
                          total ? 100.0 * (double)alloc / (double)total : 0.0, (long long)(lo < 0 ? 0 : lo),
                          (long long)hi, p->n_units, (double)p->peak_gathered / M);
    for (int u = 0; u < p->n_units && k < cap; u++)
        k += (size_t)snprintf(s + k, cap - k, "  unit %-3d %-40.40s %3d parameters, gathered %9.1f MiB\n", u,
                              p->units[u].name, p->units[u].n_params, (double)p->units[u].gather_bytes / M);
    return s;
}
