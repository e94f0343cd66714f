/* Sharded parameters without a GPU (runtime/dist/shard_plan.h): every element owned exactly
 * once, the ranks' allocations equal and within one granule per parameter of 1/N, each piece
 * aligned for the gathered element (and whole 128-blocks with block scaling), units and the
 * gather/free schedule, and a trainer's checkpoint split over N ranks and put back together
 * bit for bit, then cut again for another rank count (resume on any GPU count). Shapes are
 * random per run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fp8run.h>

#include "graph/onnx_io.h"
#include "runtime/dist/shard_plan.h"
#include "runtime/io/checkpoint.h"
#include "runtime/train/train_memory.h"
#include "runtime/train/trainer.h"
#include "tests/cli_runner.h"
#include "tests/harness.h"

/* random parameters: rank 0..4, dims 1..300 (some 0), any cut dimension, element, blocks */
static int random_specs(fr_rng *r, fr_shard_spec *s, int64_t (*dims)[FR_MAX_RANK], char (*names)[48], int max)
{
    int n = 1 + (int)(fr_rng_uniform(r) * max);
    for (int i = 0; i < n; i++) {
        const int rank = (int)(fr_rng_uniform(r) * 5);
        for (int d = 0; d < rank; d++)
            dims[i][d] = fr_rng_uniform(r) < 0.03 ? 0 : 1 + (int64_t)(fr_rng_uniform(r) * (rank > 2 ? 20 : 300));
        snprintf(names[i], sizeof names[i], "model.layers.%d.p%d", i / 3, i);
        static const int gb[] = {1, 2, 4};
        s[i] = (fr_shard_spec){names[i], rank, dims[i], rank ? (int)(fr_rng_uniform(r) * rank) : 0,
                               gb[(int)(fr_rng_uniform(r) * 3)], fr_rng_uniform(r) < 0.2 ? 128 : 0};
    }
    return n;
}

static void test_coverage_balance_alignment(void)
{
    fr_rng r = fr_test_rng("shard coverage");
    for (int trial = 0; trial < 60; trial++) {
        fr_shard_spec s[24];
        int64_t dims[24][FR_MAX_RANK];
        char names[24][48];
        const int n = random_specs(&r, s, dims, names, 24), world = 1 + (int)(fr_rng_uniform(&r) * 8);
        fr_shard_plan *p = NULL;
        FR_ASSERT_OK(fr_shard_plan_new(s, n, world, &p));
        int64_t total = 0, slack = 0;
        for (int i = 0; i < n; i++) {
            const fr_shard_param *q = &p->params[i];
            total += q->numel;
            /* each index of the cut dimension owned by exactly one rank, in rank order */
            int64_t next = 0;
            for (int rk = 0; rk < world; rk++) {
                int64_t first, count;
                fr_shard_slice(p, i, rk, &first, &count);
                CU_ASSERT(count >= 0 && count <= q->shard);
                if (count > 0) {
                    CU_ASSERT_EQUAL(first, next);
                    next = first + count;
                }
            }
            CU_ASSERT_EQUAL(next, q->extent);
            /* aligned: each run of shard x inner elements a whole number of 16-byte vectors as
               float32 masters and as gathered elements; whole blocks with block scaling */
            const int64_t run = q->shard * q->inner;
            CU_ASSERT_EQUAL((run * 4) % 16, 0);
            CU_ASSERT_EQUAL((run * q->gather_bytes) % 16, 0);
            if (q->block) CU_ASSERT_EQUAL(q->shard % 128, 0);
            /* no more than one granule of padding past the even share */
            CU_ASSERT(q->shard < (q->extent + world - 1) / world + q->granule);
            slack += q->outer * q->granule * q->inner;
        }
        /* every rank allocates the same, about 1/N: at most one granule per parameter more */
        const int64_t alloc = fr_shard_alloc_total(p), even = (total + world - 1) / world;
        CU_ASSERT(alloc * world >= total);
        CU_ASSERT(alloc <= even + slack);
        int64_t owned = 0;
        for (int rk = 0; rk < world; rk++) {
            CU_ASSERT(fr_shard_owned_numel(p, rk) <= alloc);
            owned += fr_shard_owned_numel(p, rk);
        }
        CU_ASSERT_EQUAL(owned, total);
        fr_shard_plan_free(p);
    }
    /* large parameters: the allocation is 1/N within a fraction of a percent */
    const int64_t d1[2] = {4096, 4096}, d2[2] = {128256, 2048}, d3[1] = {2048};
    fr_shard_spec big[3] = {{"model.layers.0.q.weight", 2, d1, 1, 1, 0}, {"model.embed_tokens.weight", 2, d2, 0, 4, 0},
                            {"model.layers.0.norm.weight", 1, d3, 0, 4, 0}};
    for (int world = 1; world <= 8; world++) {
        fr_shard_plan *p = NULL;
        FR_ASSERT_OK(fr_shard_plan_new(big, 3, world, &p));
        const double total = 4096.0 * 4096 + 128256.0 * 2048 + 2048;
        CU_ASSERT(fabs((double)fr_shard_alloc_total(p) * world / total - 1.0) < 1e-3);
        fr_shard_plan_free(p);
    }
    const int64_t bad[2] = {4, 4};
    fr_shard_spec e = {"w", 2, bad, 2, 4, 0};
    fr_shard_plan *p = NULL;
    CU_ASSERT_EQUAL(fr_shard_plan_new(&e, 1, 2, &p), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'w'"));
    e.dim = 0;
    e.gather_bytes = 3;
    CU_ASSERT_EQUAL(fr_shard_plan_new(&e, 1, 2, &p), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
}

static void test_scatter_gather(void)
{
    fr_rng r = fr_test_rng("shard scatter gather");
    for (int trial = 0; trial < 40; trial++) {
        fr_shard_spec s[12];
        int64_t dims[12][FR_MAX_RANK];
        char names[12][48];
        const int n = random_specs(&r, s, dims, names, 12), world = 1 + (int)(fr_rng_uniform(&r) * 6);
        fr_shard_plan *p = NULL;
        FR_ASSERT_OK(fr_shard_plan_new(s, n, world, &p));
        for (int i = 0; i < n; i++) {
            const int64_t numel = p->params[i].numel, per = fr_shard_alloc_numel(p, i);
            float *full = malloc((size_t)(numel + 1) * sizeof *full), *back = malloc((size_t)(numel + 1) * sizeof *back);
            float *sh[8];
            for (int k = 0; k < numel; k++) full[k] = (float)(fr_rng_uniform(&r) * 2 - 1);
            memset(back, 0xff, (size_t)(numel + 1) * sizeof *back);
            for (int rk = 0; rk < world; rk++) {
                sh[rk] = malloc((size_t)(per + 1) * sizeof *sh[rk]);
                fr_shard_scatter(p, i, rk, full, sh[rk]);
            }
            fr_shard_gather(p, i, (const float *const *)sh, back);
            CU_ASSERT_EQUAL(memcmp(full, back, (size_t)numel * sizeof *full), 0);
            for (int rk = 0; rk < world; rk++) free(sh[rk]);
            free(full);
            free(back);
        }
        fr_shard_plan_free(p);
    }
}

/* units by layer name; the schedule gathers before use, one ahead, frees after, and
 * reduce-scatters each unit once after its backward */
static void test_units_schedule(void)
{
    const int64_t d[2] = {64, 64};
    const char *names[] = {"model.embed_tokens.weight", "model.layers.0.q.weight", "model.layers.0.norm.weight",
                           "model.layers.1.q.weight",   "model.layers.10.q.weight", "model.norm.weight",
                           "lm_head.weight",            "model.layers.1.k.weight",  "onnx::MatMul_576",
                           "fused(model.layers.10.mlp.gate.weight,model.layers.10.mlp.up.weight)"};
    fr_shard_spec s[10];
    for (int i = 0; i < 10; i++) s[i] = (fr_shard_spec){names[i], 2, d, 0, 1, 0};
    fr_shard_plan *p = NULL;
    FR_ASSERT_OK(fr_shard_plan_new(s, 10, 4, &p));
    CU_ASSERT_EQUAL_FATAL(p->n_units, 5);
    const char *want[] = {"(before the layers)", "model.layers.0", "model.layers.1", "model.layers.10",
                          "(after the layers)"};
    for (int u = 0; u < 5; u++) CU_ASSERT_STRING_EQUAL(p->units[u].name, want[u]);
    /* the nameless one with the one before it; a fused group with its first member's layer */
    const int unit_of[] = {0, 1, 1, 2, 3, 4, 4, 2, 2, 3};
    for (int i = 0; i < 10; i++) CU_ASSERT_EQUAL(p->params[i].unit, unit_of[i]);
    CU_ASSERT_EQUAL(p->units[2].n_params, 3);

    fr_rng r = fr_test_rng("shard schedule");
    for (int trial = 0; trial < 20; trial++) {
        fr_shard_spec rs[24];
        int64_t dims[24][FR_MAX_RANK];
        char nm[24][48];
        const int n = random_specs(&r, rs, dims, nm, 24);
        fr_shard_plan *q = NULL;
        FR_ASSERT_OK(fr_shard_plan_new(rs, n, 1 + (int)(fr_rng_uniform(&r) * 8), &q));
        const int U = q->n_units;
        int held[32] = {0}, gathered[32] = {0}, freed[32] = {0}, fwd[32] = {0}, bwd[32] = {0}, rs_[32] = {0};
        size_t bytes = 0, peak = 0;
        int in_fwd = 1, resident = 0, max_resident = 0;
        for (int k = 0; k < q->n_steps; k++) {
            const fr_shard_step *st = &q->steps[k];
            const int u = st->unit;
            CU_ASSERT_FATAL(u >= 0 && u < U);
            switch (st->op) {
            case FR_SHARD_GATHER:
                CU_ASSERT(!held[u]);
                held[u] = 1, gathered[u]++, resident++;
                bytes += q->units[u].gather_bytes;
                /* one ahead: the forward's gather of u comes before unit u-1 computes */
                if (in_fwd && u > 0) CU_ASSERT(!fwd[u - 1]);
                break;
            case FR_SHARD_FORWARD:
                CU_ASSERT(held[u]);
                CU_ASSERT(u == 0 || fwd[u - 1]);
                fwd[u]++;
                if (u == U - 1) in_fwd = 0;
                break;
            case FR_SHARD_BACKWARD:
                CU_ASSERT(held[u]);
                CU_ASSERT(u == U - 1 || bwd[u + 1]);
                CU_ASSERT(!in_fwd);
                bwd[u]++;
                break;
            case FR_SHARD_FREE:
                CU_ASSERT(held[u]);
                held[u] = 0, freed[u]++, resident--;
                bytes -= q->units[u].gather_bytes;
                break;
            case FR_SHARD_REDUCE_SCATTER:
                CU_ASSERT(bwd[u] == 1 && !held[u]);
                rs_[u]++;
                break;
            }
            if (bytes > peak) peak = bytes;
            if (resident > max_resident) max_resident = resident;
        }
        for (int u = 0; u < U; u++) {
            CU_ASSERT(fwd[u] == 1 && bwd[u] == 1 && rs_[u] == 1 && !held[u]);
            CU_ASSERT_EQUAL(gathered[u], freed[u]);
            CU_ASSERT(gathered[u] == (u == U - 1 ? 1 : 2)); /* the last unit stays for the backward */
        }
        CU_ASSERT(max_resident <= 2); /* the unit computing and the one prefetched */
        CU_ASSERT_EQUAL(peak, q->peak_gathered);
        fr_shard_plan_free(q);
    }
    fr_shard_plan_free(p);
}

/* ---- checkpoints: the per-name format, cut for N ranks and put back for any M ---- */

/* a real trainer checkpoint of the tiny Llama after two AdamW steps (params and moments) */
static void make_checkpoint(const char *path)
{
    char model[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(model, sizeof model, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 8;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    int64_t win[2 * 9];
    fr_rng r = fr_test_rng("shard checkpoint");
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < 18; i++) win[i] = (int64_t)(fr_rng_uniform(&r) * 100);
        fr_train_stats stats;
        FR_ASSERT_OK(fr_trainer_step(t, win, 1, &stats));
    }
    FR_ASSERT_OK(fr_trainer_save(t, path, NULL, 0));
    fr_trainer_free(t);
    fr_graph_free(g);
}

static fr_shard_plan *plan_of(const fr_ckpt *c, int world, int **index)
{
    const int n = fr_ckpt_tensor_count(c);
    fr_shard_spec *s = calloc((size_t)n, sizeof *s);
    int m = 0;
    *index = calloc((size_t)n, sizeof **index);
    for (int i = 0; i < n; i++) {
        const fr_ckpt_tensor *x = fr_ckpt_tensor_at(c, i);
        if (x->dtype != FR_F32) continue; /* steps, RNG words: not sharded */
        /* a weight cut along its last dimension (MatMul layout: the output features), the rest dim 0 */
        s[m] = (fr_shard_spec){x->name, x->rank, x->dims, x->rank == 2 ? 1 : 0, x->rank == 2 ? 1 : 4,
                               x->rank == 2 && m % 2 ? 128 : 0};
        (*index)[m++] = i;
    }
    fr_shard_plan *p = NULL;
    FR_ASSERT_OK(fr_shard_plan_new(s, m, world, &p));
    free(s);
    return p;
}

static void test_checkpoint_any_count(void)
{
    char ck[700], out[700];
    snprintf(ck, sizeof ck, "%s/sharded.ckpt", cli_tmp);
    make_checkpoint(ck);
    fr_ckpt *c = NULL;
    FR_ASSERT_OK(fr_ckpt_open(ck, &c));
    int n_float = 0, n_moments = 0;
    for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
        n_float += fr_ckpt_tensor_at(c, i)->dtype == FR_F32;
        n_moments += strcmp(fr_ckpt_tensor_at(c, i)->kind, "param") != 0 && fr_ckpt_tensor_at(c, i)->dtype == FR_F32;
    }
    CU_ASSERT(n_float > 10);
    CU_ASSERT(n_moments > 0); /* optimizer state too, not only the weights */
    for (int N = 1; N <= 5; N++) {
        int *idx;
        fr_shard_plan *p = plan_of(c, N, &idx);
        /* N ranks' shards of every tensor (what each rank holds in a sharded run) ... */
        float **sh = calloc((size_t)p->n_params * (size_t)N, sizeof *sh);
        for (int i = 0; i < p->n_params; i++)
            for (int rk = 0; rk < N; rk++) {
                sh[i * N + rk] = malloc((size_t)(fr_shard_alloc_numel(p, i) + 1) * sizeof(float));
                fr_shard_scatter(p, i, rk, fr_ckpt_tensor_at(c, idx[i])->data, sh[i * N + rk]);
            }
        /* ... gathered into a checkpoint of whole tensors by name, as a sharded run saves */
        snprintf(out, sizeof out, "%s/gathered_%d.ckpt", cli_tmp, N);
        fr_ckpt_writer *w = NULL;
        FR_ASSERT_OK(fr_ckpt_writer_open(out, &w));
        for (int i = 0; i < p->n_params; i++) {
            const fr_ckpt_tensor *x = fr_ckpt_tensor_at(c, idx[i]);
            float *full = malloc(x->nbytes + 4);
            fr_shard_gather(p, i, (const float *const *)&sh[i * N], full);
            FR_ASSERT_OK(fr_ckpt_write_tensor(w, x->name, x->kind, x->dtype, x->rank, x->dims, full));
            free(full);
        }
        FR_ASSERT_OK(fr_ckpt_writer_commit(w));
        fr_ckpt *b = NULL;
        FR_ASSERT_OK(fr_ckpt_open(out, &b));
        CU_ASSERT_EQUAL(fr_ckpt_tensor_count(b), p->n_params);
        for (int i = 0; i < p->n_params; i++) {
            const fr_ckpt_tensor *x = fr_ckpt_tensor_at(c, idx[i]), *y = fr_ckpt_find(b, x->name, x->kind);
            CU_ASSERT_PTR_NOT_NULL_FATAL(y);
            CU_ASSERT(y->nbytes == x->nbytes && memcmp(y->data, x->data, x->nbytes) == 0); /* bit for bit */
        }
        /* resumed on M ranks: each takes its cut of the gathered file; put together again, the
           same bits as the original */
        for (int M = 1; M <= 5; M++) {
            int *idx2;
            fr_shard_plan *q = plan_of(b, M, &idx2);
            for (int i = 0; i < q->n_params; i++) {
                const fr_ckpt_tensor *y = fr_ckpt_tensor_at(b, idx2[i]), *x = fr_ckpt_find(c, y->name, y->kind);
                float *part[5], *full = malloc(y->nbytes + 4);
                for (int rk = 0; rk < M; rk++) {
                    part[rk] = malloc((size_t)(fr_shard_alloc_numel(q, i) + 1) * sizeof(float));
                    fr_shard_scatter(q, i, rk, y->data, part[rk]);
                }
                fr_shard_gather(q, i, (const float *const *)part, full);
                CU_ASSERT(memcmp(full, x->data, x->nbytes) == 0);
                for (int rk = 0; rk < M; rk++) free(part[rk]);
                free(full);
            }
            fr_shard_plan_free(q);
            free(idx2);
        }
        fr_ckpt_close(b);
        for (int i = 0; i < p->n_params * N; i++) free(sh[i]);
        free(sh);
        free(idx);
        fr_shard_plan_free(p);
    }
    fr_ckpt_close(c);
}


/* ---- memory: masters, optimizer state and gradients fall as 1/N ---- */
static void test_memory_one_over_n(void)
{
    char model[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(model, sizeof model, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.shard_parameters = 1;
    fr_train_memory one, m;
    o.world_size = 0;
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 0, &one));
    CU_ASSERT_EQUAL(one.gathered, 0); /* alone: nothing sharded */
    for (int N = 2; N <= 8; N *= 2) {
        o.world_size = N;
        FR_ASSERT_OK(fr_train_predict_memory(g, &o, 0, &m));
        const size_t parts[3][2] = {{one.params, m.params}, {one.optimizer_state, m.optimizer_state},
                                    {one.grads, m.grads}};
        for (int k = 0; k < 3; k++) {
            const double ratio = (double)parts[k][1] * N / (double)parts[k][0];
            if (ratio < 1.0 || ratio > 1.02) printf("\n  part %d with %d ranks: %.4f x 1/N", k, N, ratio);
            CU_ASSERT(ratio >= 1.0 && ratio <= 1.02); /* 1/N, padding within 2% on this small model */
        }
        CU_ASSERT_EQUAL(m.activations, one.activations); /* the executor's plan is the same */
        CU_ASSERT(m.gathered > 0 && m.gathered < one.params);
        CU_ASSERT_EQUAL(m.total, m.params + m.grads + m.optimizer_state + m.fp8_weights + m.activations +
                                     m.eval_activations + m.inputs + m.workspace + m.gathered);
    }
    /* a session with it is refused, saying why */
    o.world_size = 0;
    fr_trainer *t = NULL;
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "needs a multi-GPU run that has not been made"));
    CU_ASSERT_PTR_NULL(t);
    fr_graph_free(g);

    /* the CLI: per-rank memory and the plan */
    CLI_EXPECT(cli_run("info %s --memory=cpu --batch 2 --seq 16 --gpus 4 --shard-parameters", model), 0, cli_out,
               "one of 4 ranks (sharded parameters, ZeRO-3)");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "gathered weights"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "over 4 ranks: each rank allocates"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "units, gathered one ahead"));
    FILE *f = fopen(cli_path("tok.bin"), "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 2000; i++) fputc(i % 100, f), fputc(0, f); /* uint16 ids below the vocabulary */
    fclose(f);
    CLI_EXPECT(cli_run("train %s --data tok.bin --batch 2 --seq 8 --steps 1 --lr 0.01 --device cpu --shard-parameters",
                       model), 1, cli_err, "needs a multi-GPU run");
}

/* ---- the C API: env, plans from a checkpoint's parameters, scatter and gather ---- */
static void test_api(void)
{
    char model[600], ck[700];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    snprintf(ck, sizeof ck, "%s/api.ckpt", cli_tmp);
    make_checkpoint(ck);
    fp8run_checkpoint *c = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_checkpoint_open(ck, &c), FP8RUN_OK);
    const int n = fp8run_checkpoint_param_count(c);
    fp8run_value_info *vi = calloc((size_t)n, sizeof *vi);
    for (int i = 0; i < n; i++) {
        vi[i].struct_size = sizeof vi[i];
        CU_ASSERT_EQUAL(fp8run_checkpoint_param(c, i, &vi[i]), FP8RUN_OK);
    }
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(model, &m), FP8RUN_OK);
    fr_rng r = fr_test_rng("shard api");
    for (int world = 1; world <= 5; world++) {
        fp8run_shard_plan *p = NULL;
        CU_ASSERT_EQUAL_FATAL(fp8run_shard_plan_create(vi, n, world, &p), FP8RUN_OK);
        CU_ASSERT_EQUAL(fp8run_shard_plan_param_count(p), n);
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_shard_plan_text(p), "ranks"));
        for (int i = 0; i < n; i++) {
            fp8run_shard_info info = {.struct_size = sizeof info};
            CU_ASSERT_EQUAL_FATAL(fp8run_shard_plan_param(p, i, &info), FP8RUN_OK);
            CU_ASSERT_STRING_EQUAL(info.name, vi[i].name);
            float *full = malloc((size_t)info.numel * sizeof *full), *back = calloc((size_t)info.numel, sizeof *back);
            float *sh[5];
            for (int64_t k = 0; k < info.numel; k++) full[k] = (float)fr_rng_uniform(&r);
            int64_t covered = 0;
            for (int rk = 0; rk < world; rk++) {
                int64_t first, count;
                CU_ASSERT_EQUAL(fp8run_shard_plan_slice(p, info.name, rk, &first, &count), FP8RUN_OK);
                covered += count;
                sh[rk] = malloc((size_t)info.shard_numel * sizeof *sh[rk]);
                CU_ASSERT_EQUAL(fp8run_shard_scatter(p, info.name, rk, full, (size_t)info.numel, sh[rk],
                                                     (size_t)info.shard_numel), FP8RUN_OK);
            }
            CU_ASSERT_EQUAL(covered, info.extent);
            CU_ASSERT_EQUAL(fp8run_shard_gather(p, info.name, (const float *const *)sh, (size_t)info.shard_numel, back,
                                                (size_t)info.numel), FP8RUN_OK);
            CU_ASSERT_EQUAL(memcmp(full, back, (size_t)info.numel * sizeof *full), 0);
            /* sizes are checked */
            CU_ASSERT_EQUAL(fp8run_shard_scatter(p, info.name, 0, full, (size_t)info.numel + 1, sh[0],
                                                 (size_t)info.shard_numel), FP8RUN_ERR_INVALID_ARG);
            for (int rk = 0; rk < world; rk++) free(sh[rk]);
            free(full);
            free(back);
        }
        int64_t a, b;
        CU_ASSERT_EQUAL(fp8run_shard_plan_slice(p, "no.such.weight", 0, &a, &b), FP8RUN_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "no.such.weight"));
        CU_ASSERT_EQUAL(fp8run_shard_plan_slice(p, vi[0].name, world, &a, &b), FP8RUN_ERR_INVALID_ARG);
        fp8run_shard_plan_destroy(p);
        /* the trainer's plan of the model (the FP8 compiler's cuts), and its memory report */
        fp8run_train_config cfg;
        CU_ASSERT_EQUAL(fp8run_train_config_init(&cfg, sizeof cfg), FP8RUN_OK);
        cfg.batch = 2;
        cfg.seq_len = 16;
        cfg.precision = "fp8";
        CU_ASSERT_EQUAL_FATAL(fp8run_model_shard_plan(m, &cfg, world, &p), FP8RUN_OK);
        int fp8 = 0;
        for (int i = 0; i < fp8run_shard_plan_param_count(p); i++) {
            fp8run_shard_info info = {.struct_size = sizeof info};
            CU_ASSERT_EQUAL(fp8run_shard_plan_param(p, i, &info), FP8RUN_OK);
            fp8 += info.gather_bytes == 1;
        }
        CU_ASSERT(fp8 > 0); /* the FP8 Linears' weights travel as codes */
        fp8run_shard_plan_destroy(p);
        cfg.world_size = world;
        cfg.shard_parameters = 1;
        fp8run_memory_report rep = {.struct_size = sizeof rep};
        CU_ASSERT_EQUAL(fp8run_model_predict_memory(m, &cfg, "cpu", &rep), FP8RUN_OK);
        CU_ASSERT(world == 1 ? rep.gathered_weights == 0 : rep.gathered_weights > 0);
    }
    fp8run_model_destroy(m);
    free(vi);
    fp8run_checkpoint_close(c);
}

static CU_TestInfo tests[] = {
    {"coverage, balance, alignment", test_coverage_balance_alignment},
    {"scatter and gather", test_scatter_gather},
    {"units and the gather/free schedule", test_units_schedule},
    {"checkpoint split over 1..5 ranks, resumed on 1..5", test_checkpoint_any_count},
    {"memory: masters, state, gradients as 1/N; training refused", test_memory_one_over_n},
    {"C API: plans, slices, scatter and gather", test_api},
    CU_TEST_INFO_NULL};
static CU_SuiteInfo suites[] = {{"shard plan", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
                                CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
