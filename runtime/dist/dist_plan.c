/* Data-parallel planning (dist.h): gradient buckets, optimizer-state owners and the data split.
 * Pure functions: every rank computes the same answers. */
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/dist.h"

fr_status fr_dist_plan_buckets(const int64_t *numel, int n, size_t elem_size, size_t bucket_bytes,
                               fr_dist_bucket **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (n < 0 || elem_size == 0 || bucket_bytes == 0)
        return fr_error(FR_ERR_INVALID_ARG, "gradient buckets: %d parameters, %zu-byte elements, %zu-byte buckets", n,
                        elem_size, bucket_bytes);
    fr_dist_bucket *b = fr_calloc((size_t)(n ? n : 1), sizeof *b, "gradient buckets");
    if (!b) return FR_ERR_OOM;
    int nb = 0;
    for (int i = n - 1; i >= 0; i--) {
        size_t bytes = (size_t)numel[i] * elem_size;
        fr_dist_bucket *cur = nb ? &b[nb - 1] : NULL;
        if (cur && (size_t)cur->numel * elem_size + bytes <= bucket_bytes) {
            cur->count++;
            cur->numel += numel[i];
            continue;
        }
        b[nb++] = (fr_dist_bucket){i, 1, numel[i]};
    }
    *out = b;
    *n_out = nb;
    return FR_OK;
}

void fr_dist_bucket_ready(const fr_dist_bucket *b, int nb, const int *last_touch, int *ready)
{
    int run = -1;
    for (int k = 0; k < nb; k++) {
        for (int j = 0; j < b[k].count; j++)
            if (last_touch[b[k].first - j] > run) run = last_touch[b[k].first - j];
        ready[k] = run;
    }
}

fr_status fr_dist_bucket_chunks(const int64_t *numel, int n, const int *owner, int rank, int64_t chunk,
                                const fr_dist_bucket *b, int nb, int *first, int *count)
{
    if (chunk <= 0) return fr_error(FR_ERR_INVALID_ARG, "gradient bucket chunks: %lld-element chunks", (long long)chunk);
    int *start = fr_malloc((size_t)(n + 1) * sizeof *start, "gradient bucket chunks");
    if (!start) return FR_ERR_OOM;
    start[0] = 0;
    for (int i = 0; i < n; i++)
        start[i + 1] = start[i] + (!owner || owner[i] == rank ? (int)((numel[i] + chunk - 1) / chunk) : 0);
    for (int k = 0; k < nb; k++) {
        const int lo = b[k].first - b[k].count + 1, hi = b[k].first;
        first[k] = start[lo];
        count[k] = start[hi + 1] - start[lo];
    }
    free(start);
    return FR_OK;
}

fr_status fr_dist_partition(const int64_t *numel, int n, int world, int *owner)
{
    if (world < 1) return fr_error(FR_ERR_INVALID_ARG, "optimizer shards: world size %d", world);
    int *order = fr_malloc((size_t)(n ? n : 1) * sizeof *order, "optimizer shards");
    int64_t *load = fr_calloc((size_t)world, sizeof *load, "optimizer shards");
    if (!order || !load) {
        free(order);
        free(load);
        return FR_ERR_OOM;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    /* insertion sort by descending size, stable (n is a few hundred parameters) */
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        while (j > 0 && numel[order[j - 1]] < numel[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[order[i]] = best;
        load[best] += numel[order[i]];
    }
    free(order);
    free(load);
    return FR_OK;
}

int64_t fr_dist_owned_numel(const int64_t *numel, const int *owner, int n, int rank)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        if (owner[i] == rank) s += numel[i];
    return s;
}

void fr_dist_split_windows(const int64_t *global, int64_t *local, int k, int64_t batch, int64_t win, int rank,
                           int world)
{
    const int64_t per = batch * win;
    for (int m = 0; m < k; m++)
        memcpy(local + (int64_t)m * per, global + ((int64_t)m * world + rank) * per, (size_t)per * sizeof *local);
}
