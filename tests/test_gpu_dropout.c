/* GPU kernel of ai.fp8run::KeyedDropout (ops/cuda/dropout.cu) against the CPU kernel
 * (ops/dropout.c): the mask is the hash of ops/dropout_mask.h on both, so the outputs must be
 * equal BIT FOR BIT (memcmp) for finite inputs, fresh random keys (seed, step, micro-batch),
 * streams and ratios (0, 0.1, 0.5, 0.9 and a random one), float32/64/16 and bfloat16, ragged
 * and empty shapes and one of 2^20 + 3 elements (grid-stride loop). NaN and Inf inputs: the
 * same values (a NaN's payload may differ: the device's NaN is canonical).
 * Then training: LoRA with --lora-dropout 0.1 on the hf llama fixture, fp32, 10 steps on the
 * CPU and on CUDA (the key fed per micro-batch, two micro-batches per step): losses within
 * 1e-3 relative and the adapters within 1e-3 relative L2 (test_gpu_train's fp32 tolerance:
 * the GEMMs sum in another order), while the CPU run without dropout lies 20 times farther
 * away at least (so the masks are the same ones, not merely as many); the eval losses (no
 * dropout) within 1e-3. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "ops/dropout_mask.h"
#include "runtime/train/trainer.h"
#include "tests/gpu_harness.h"

static uint64_t fresh_u64(fr_rng *r)
{
    uint64_t hi = (uint64_t)(fr_rng_uniform(r) * 4294967296.0), lo = (uint64_t)(fr_rng_uniform(r) * 4294967296.0);
    return hi << 32 | lo;
}

static fr_tensor *rand_x(fr_rng *r, fr_dtype dt, int rank, const int64_t *d, int specials)
{
    fr_tensor *x = tt_new(dt, rank, d);
    const int64_t n = fr_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        double v = 3.0 * fr_rng_normal(r);
        if (specials && i % 7 == 3) v = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        switch (dt) {
        case FR_F32: ((float *)x->data)[i] = (float)v; break;
        case FR_F64: ((double *)x->data)[i] = v; break;
        case FR_F16: ((uint16_t *)x->data)[i] = fr_f32_to_f16((float)v); break;
        default: ((uint16_t *)x->data)[i] = fr_f32_to_bf16((float)v); break;
        }
    }
    return x;
}

/* One case on both devices: bit for bit (specials: equal values, NaN meeting NaN). */
static void run_case(fr_rng *r, fr_dtype dt, int rank, const int64_t *d, float ratio, int specials)
{
    fr_tensor *x = rand_x(r, dt, rank, d, specials);
    int64_t kv[3] = {(int64_t)fresh_u64(r), tt_rand_int(r, 0, 1 << 30), tt_rand_int(r, 0, 7)};
    fr_tensor *key = tt_ints(FR_I64, 3, kv);
    fr_tensor *ins[2] = {x, key};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "KeyedDropout", 1, 2, ins, 0u, 1);
    TN_ATTR(&t, float, "ratio", ratio);
    TN_ATTR(&t, int, "seed", (int64_t)fresh_u64(r));
    FR_ASSERT_OK(tn_run(&t));
    char what[160], sh[96];
    fr_shape_str(rank, d, sh, sizeof sh);
    snprintf(what, sizeof what, "KeyedDropout %s %s ratio %g%s", fr_dtype_name(dt), sh, (double)ratio,
             specials ? " with NaN/Inf" : "");
    if (specials) {
        gpu_check(&t, 0.0, what); /* equal values, NaN meeting NaN */
    } else {
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        FR_ASSERT_OK(st);
        if (st == FR_OK) {
            const fr_tensor *want = t.out[0];
            int same = want->nbytes == 0 || memcmp(g[0]->data, want->data, want->nbytes) == 0;
            if (!same) {
                gpu_print_case(what, &t);
                gpu_print_mismatch("y", g[0], want, gpu_rel_err(g[0], want), 0.0);
            }
            CU_ASSERT(same);
        }
        gpu_free_outputs(&t, g);
    }
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(key);
}

static void test_bit_for_bit(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_dropout");
    static const struct {
        int rank;
        int64_t d[3];
    } shapes[] = {{1, {1}}, {2, {3, 7}}, {3, {2, 5, 33}}, {2, {129, 100}}, {2, {0, 4}}, {1, {(1 << 20) + 3}}};
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_F16, FR_BF16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int di = 0; di < 4; di++) {
            const float ratios[5] = {0.0f, 0.1f, 0.5f, 0.9f, (float)(0.99 * fr_rng_uniform(&r))};
            for (int k = 0; k < 5; k++) run_case(&r, dts[di], shapes[s].rank, shapes[s].d, ratios[k], 0);
        }
}

static void test_specials(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_dropout_specials");
    int64_t d[2] = {17, 23};
    run_case(&r, FR_F32, 2, d, 0.3f, 1);
    run_case(&r, FR_F64, 2, d, 0.3f, 1);
}

/* ---- LoRA dropout training, CPU vs CUDA ---- */

static fr_train_options options(const char *device, double dropout)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 11;
    o.device = device;
    o.lr.max_lr = 1e-2;
    o.seed = 11;
    o.grad_accum = 2;
    o.lora.rank = 4;
    o.lora.alpha = 8;
    o.lora.targets = "q_proj|v_proj";
    o.lora.dropout = dropout;
    return o;
}

static void train(fr_trainer *t, double *loss, double *eval)
{
    const int64_t n = 2 * 2 * 12;
    int64_t w[2 * 2 * 12];
    uint64_t s = 5;
    for (int i = 0; i < 10; i++) {
        for (int64_t e = 0; e < n; e++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            w[e] = (int64_t)(s % (uint64_t)fr_trainer_vocab(t));
        }
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, 2, &st));
        loss[i] = st.loss;
    }
    FR_ASSERT_OK(fr_trainer_eval(t, w, eval));
}

static void test_lora_training(void)
{
    if (!gpu_available()) return;
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "hf/llama_op18_static/model.onnx"), &g));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options oc = options("cpu", 0.1), og = options("cuda", 0.1), on = options("cpu", 0);
    fr_trainer *tc = NULL, *tg = NULL, *tn = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg));
    FR_ASSERT_OK(fr_trainer_new(g, &on, &tn));
    CU_ASSERT_FATAL(tc && tg && tn);
    double lc[10], lg[10], ln[10], ec, eg, en, worst = 0;
    train(tc, lc, &ec);
    train(tg, lg, &eg);
    train(tn, ln, &en);
    for (int i = 0; i < 10; i++) {
        double d = fabs(lg[i] - lc[i]) / fabs(lc[i]);
        if (d > worst) worst = d;
    }
    double same = gpu_params_rel_diff(tg, tc), other = gpu_params_rel_diff(tn, tc);
    printf(" (on %s: worst loss rel diff %.2e, adapters rel L2 %.2e; CPU without dropout %.2e; eval %.6f / %.6f)",
           fr_trainer_device(tg), worst, same, other, ec, eg);
    CU_ASSERT(worst <= 1e-3);
    CU_ASSERT(same <= 1e-3);
    CU_ASSERT(other > 20 * same); /* other masks move the adapters far more */
    CU_ASSERT(fabs(eg - ec) <= 1e-3 * fabs(ec));
    fr_trainer_free(tc);
    fr_trainer_free(tg);
    fr_trainer_free(tn);
    fr_graph_free(g);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"KeyedDropout == CPU bit for bit, every float dtype", test_bit_for_bit},
        {"NaN / Inf inputs: the same values", test_specials},
        {"LoRA dropout training: GPU == CPU (1e-3), the same masks", test_lora_training},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_dropout", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
