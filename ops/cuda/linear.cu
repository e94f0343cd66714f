/* CUDA kernels of the linear family: ai.fp8run::Linear, LinearGradData, LinearGradWeight (the
 * contract is ops/linear.h; the CPU emulation ops/linear.c is the reference).
 *
 *   fp32  cuBLASLt in true float32 (float64 tensors: CUBLAS_COMPUTE_64F); within 1e-5.
 *   bf16  operands rounded to bf16 like the CPU (__float2bfloat16_rn), bf16 x bf16 -> f32.
 *         The forward rounds X straight into Xq when the graph saves it, the data gradient dY
 *         into dYq; the weight gradient multiplies those bf16 copies as they are (cuBLASLt's
 *         bf16 GEMM takes either transpose: no transposed copy), converting only float inputs.
 *   fp8   operands quantized to the CPU's exact bytes (ops/cuda/quantize.cuh), multiplied by
 *         cuBLASLt's FP8 GEMM with the scale_inv of each operand: per tensor (delayed, current)
 *         or in blocks (block: 1x128 of X / dY along the contraction dim, 128x128 of W, 128x1
 *         along the tokens for the weight gradient: cuBLASLt's VEC128 / BLK128x128 modes).
 *         Forward E4M3 x E4M3, dX = dY (E5M2 in hybrid) x W (E4M3), dW = X^T (E4M3) x dY^T.
 *         Per tensor, one pass over X writes its GEMM's codes (scratch) and the saved Xq^T
 *         [K][M], one over dY its codes and dYq [N][M]: the weight gradient multiplies both as
 *         they are (a padded copy where M, N or K is not a multiple of 16).
 *         BF16/FP8 results are within 1e-2 of the CPU (same products, cuBLASLt's summation
 *         order instead of the CPU's fixed one; measured on an H100: bf16 ~3e-7, fp8 ~2e-4,
 *         the FP8 tensor cores' accumulation being the larger part). With ctx->fp8_fast_accum
 *         the per-tensor forward GEMM accumulates in the fast mode (cuda_gemm.h), which the
 *         CPU does not emulate: GPU-vs-CPU comparisons run with it off.
 * A bfloat16 X / dY (linear.h) is read as it is: the bf16 GEMM's operand, or widened exactly by
 * the quantization kernels (16-byte loads); y_dtype / dx_dtype bfloat16: the GEMM writes bf16.
 * Hopper's FP8 GEMM wants both operands K-contiguous with dims multiples of 16: the
 * quantization kernels write the operands into scratch in that layout (transposed where the
 * GEMM contracts over the source's rows), zero-padded to multiples of 16; a padded result is
 * copied out (the bias added on the way). A bias with an unpadded result: cuBLASLt's BIAS
 * epilogue where it takes the bias, else the same finishing pass (fr_q_gemm_out); a bfloat16 Y
 * adds the bias rounded to bf16 (linear.h; cuBLASLt refuses a float32 bias with a bf16 D) on
 * both paths. Zero padding adds exact zeros: pad_multiple (the CPU's emulation) changes nothing.
 *
 * Scratch (sized at plan time from the static shapes): fr_q_stats, the quantized operands,
 * their block scales, the padded result. A refused scale (NaN/Inf amax in current/block,
 * a delayed scale that is not finite and > 0: the CPU's FR_ERR_NUMERIC) sets a bit in the
 * node's fr_q_stats.flags and makes the outputs it touches NaN, so the trainer's non-finite
 * check skips the step; see quantize.cuh. Nothing here synchronizes.
 *
 * The weight cache (cuda_kernel.h, "Persistent memory"): when W (and, in the delayed recipe,
 * scale_w) are graph constants, Linear and LinearGradData convert W (fp8 codes with their
 * scale_inv, amax and block scales; or W's bf16 copy) into the node's persistent memory once
 * per weights_version, not once per run: with k micro-batches per optimizer step W is cast
 * once instead of k times. A later run reuses the bytes as they are (the same bytes, so the
 * results are bit-identical) and writes amax_w again from the kept statistics, so the delayed
 * recipe's history sees what it saw before. A W that a node computes is converted every run.
 * A constant bias's bf16 copy (bfloat16 Y) is kept beside W's and converted with it; frozen
 * nodes and other biases round it into scratch every run (a bias change does not re-prime). */
#include "ops/cuda/linear_plan.cuh"

/* ---- shared run-time pieces ---- */

typedef struct lin_run {
    const fr_cuda_kctx *k;
    const fr_node *n;
    cudaStream_t s;
    lin_cfg c;
    lin_plan p;
    int64_t M, N, K;
    char *base;
    fr_q_stats *stats;
    int kept, b_kept; /* W's converted copy (and the bias's) in persistent memory (wp), else scratch */
    w_plan wp;
    char *wbase;
    int fast_accum; /* the forward's per-tensor fp8 GEMM: fast accumulation (cuda_gemm.h) */
    double beta;    /* 1: the GEMM adds into its (unpadded float32) output (fr_cuda_ctx.accumulate_out) */
} lin_run;

static const fr_tensor *opt_in(const fr_cuda_kctx *k, int i) { return i < k->n_in ? k->in[i] : NULL; }
static fr_tensor *opt_out(const fr_cuda_kctx *k, int o) { return o < k->n_out ? k->out[o] : NULL; }

static fr_status begin(lin_op op, const fr_cuda_kctx *k, lin_run *r)
{
    memset(r, 0, sizeof *r);
    r->k = k;
    r->n = k->node;
    r->s = k->cu->stream;
    FR_TRY(read_cfg(r->n, &r->c));
    if (k->n_in < 2 || !k->in[0] || !k->in[1] || k->n_out < 1 || !k->out[0])
        return fr_node_error(r->n, FR_ERR_GRAPH, "needs its two inputs and its first output");
    const fr_tensor *a = k->in[0], *b = k->in[1];
    int dyq = op == OP_WGRAD && is_fp8_type(b->dtype), xqt = op == OP_WGRAD && saved_t(&r->c, a->dtype);
    FR_TRY(node_dims(op, r->n, &r->c, a->rank, a->dims, b->rank, b->dims, dyq, xqt, &r->M, &r->N, &r->K));
    int out_slot = op == OP_FWD ? FR_LIN_OUT_XQ : 2, ga, gb;
    int has_out = op != OP_WGRAD && out_slot < k->n_out && k->out[out_slot];
    bf16_given(op, &r->c, has_out, a->dtype == FR_BF16, b->dtype == FR_BF16, &ga, &gb);
    r->kept = w_kept(op, fr_cuda_weight_cache(k->cu), k->g, r->n, &r->c);
    const int has_bias = k->n_in > FR_LIN_IN_B && k->in[FR_LIN_IN_B];
    make_plan(op, &r->c, r->M, r->N, r->K, dyq, xqt, ga, gb, r->kept, has_bias && r->c.y_bf16, &r->p);
    if (r->p.total > k->scratch_bytes)
        return fr_node_error(r->n, FR_ERR_INTERNAL, "scratch of %zu bytes is smaller than the %zu planned",
                             k->scratch_bytes, r->p.total);
    r->base = (char *)k->scratch;
    r->b_kept = bias_kept(op, fr_cuda_weight_cache(k->cu), k->g, r->n, &r->c);
    if (r->kept) {
        make_w_plan(op, &r->c, r->N, r->K, r->b_kept, &r->wp);
        if (!k->persist || !k->persist_version || r->wp.total > k->persist_bytes)
            return fr_node_error(r->n, FR_ERR_INTERNAL, "persistent memory of %zu bytes is smaller than the %zu planned",
                                 k->persist ? k->persist_bytes : 0, r->wp.total);
        r->wbase = (char *)k->persist;
    }
    if (r->c.prec == FR_LIN_FP8) {
        r->stats = (fr_q_stats *)(r->base + r->p.stats);
        FR_CUDA_TRY(cudaMemsetAsync(r->stats, 0, sizeof(fr_q_stats), r->s));
    }
    if (r->c.prec == FR_LIN_FP32 && (a->dtype == FR_BF16 || b->dtype == FR_BF16))
        return fr_node_error(r->n, FR_ERR_UNSUPPORTED, "bfloat16 inputs need precision bf16 or fp8");
    fr_dtype dt = !is_low_type(a->dtype) ? a->dtype : !is_low_type(b->dtype) ? b->dtype : k->out[0]->dtype;
    if (dt != FR_F32 && !(dt == FR_F64 && r->c.prec == FR_LIN_FP32))
        return fr_node_error(r->n, FR_ERR_UNSUPPORTED, "dtype %s in %s precision", fr_dtype_name(dt),
                             fr_lin_precision_name(r->c.prec));
    return FR_OK;
}

static fr_status check_out(const lin_run *r, const fr_tensor *t, int64_t rows, int64_t cols, fr_dtype dt,
                           const char *what)
{
    if (!t) return FR_OK;
    if (t->dtype != dt || fr_tensor_numel(t) != rows * cols)
        return fr_node_error(r->n, FR_ERR_SHAPE, "output %s does not have the inferred shape (re-run shape "
                             "inference)", what);
    return FR_OK;
}

/* float GEMM (fp32 / f64 / bf16 copies) C [Mg][Ng] = op(A) op(B) (+ bias, bf16 for a bf16 D) into
 * D of out_type (fr_q_gemm_out: the bias epilogue, or the plan's float32 result for a bf16 D) */
static fr_status float_gemm(lin_run *r, fr_dtype in_type, fr_dtype out_type, int64_t Mg, int64_t Ng, int64_t Kg,
                            const void *A, int ta, const void *B, int tb, void *D, const void *bias)
{
    fr_gemm g;
    fr_gemm_init(&g);
    g.M = Mg;
    g.N = Ng;
    g.K = Kg;
    g.trans_a = ta;
    g.trans_b = tb;
    g.a_type = g.b_type = in_type;
    g.A = A;
    g.B = B;
    g.beta = r->beta;
    return fr_q_gemm_out(r->k->cu, r->n, &g, out_type, D, Mg, Ng, bias, r->base + r->p.d);
}

/* fp8 GEMM C [Mg][Ng] = A [Mg][Kg] . B [Ng][Kg]^T (padded dims) into Y [rows][cols] (float32 or
 * bfloat16), through the plan's padded buffer when padded, then the copy-out / bias (fr_q_gemm_out). */
static fr_status fp8_gemm(lin_run *r, int64_t Mg, int64_t Ng, int64_t Kg, const uint8_t *A, int a_e5m2,
                          const float *sa, fr_gemm_scale ma, const uint8_t *B, int b_e5m2, const float *sb,
                          fr_gemm_scale mb, fr_tensor *Y, int64_t rows, int64_t cols, const void *bias)
{
    fr_gemm g;
    fr_gemm_init(&g);
    g.M = Mg;
    g.N = Ng;
    g.K = Kg;
    g.trans_b = 1;
    g.a_type = a_e5m2 ? FR_F8E5M2 : FR_F8E4M3;
    g.b_type = b_e5m2 ? FR_F8E5M2 : FR_F8E4M3;
    g.A = A;
    g.B = B;
    g.a_scale_inv = sa;
    g.b_scale_inv = sb;
    g.a_scale = ma;
    g.b_scale = mb;
    g.fast_accum = r->fast_accum;
    g.beta = r->beta;
    return fr_q_gemm_out(r->k->cu, r->n, &g, Y->dtype, Y->data, rows, cols, bias, r->base + r->p.d);
}

/* A float32 or bfloat16 tensor as the quantization kernels read it (quantize.cuh) */
static fr_q_src q_src(const fr_tensor *t)
{
    fr_q_src s = {t->data, t->dtype == FR_BF16};
    return s;
}

/* The bf16 GEMM operand of a float32 or bfloat16 source: a bfloat16 source is its own operand
 * (copied into `keep` when the node outputs its bf16 copy), a float32 one is rounded into
 * `keep` or the scratch `tmp`. */
static fr_status bf16_operand(lin_run *r, const fr_tensor *src, int64_t count, void *keep, void *tmp, const void **op)
{
    if (src->dtype == FR_BF16) {
        if (keep && count) FR_CUDA_TRY(cudaMemcpyAsync(keep, src->data, (size_t)count * 2, cudaMemcpyDeviceToDevice, r->s));
        *op = src->data;
        return FR_OK;
    }
    void *dst = keep ? keep : tmp;
    *op = dst;
    return fr_q_to_bf16(r->s, r->n, (const float *)src->data, count, dst);
}

/* Per-tensor fp8 quantization of one operand: delayed (given scale, amax in the same pass) or
 * current (amax, scale, then the cast). dst: padded [Rp][Cp] or its transpose. */
static fr_status quant_tensor(lin_run *r, fr_q_stats *st, int slot, const fr_tensor *src, int64_t R, int64_t C,
                              fr_q_fmt f, const fr_tensor *given, int trans, uint8_t *dst, uint8_t *dense,
                              uint8_t *dense_t, float *amax_out, float *sinv_out)
{
    fr_q_src x = q_src(src);
    if (given) {
        FR_TRY(fr_q_tensor(r->s, r->n, x, R, C, (const float *)given->data, f, trans, dst, dense, dense_t, st, slot));
        return fr_q_finalize(r->s, r->n, st, slot, (const float *)given->data, 0, f, amax_out, sinv_out);
    }
    FR_TRY(fr_q_amax(r->s, r->n, x, R * C, st, slot));
    FR_TRY(fr_q_finalize(r->s, r->n, st, slot, NULL, 1, f, amax_out, sinv_out));
    return fr_q_tensor(r->s, r->n, x, R, C, &st->scale[slot], f, trans, dst, dense, dense_t, st, -1);
}

static fr_status need_scale(const lin_run *r, const fr_tensor *t, const char *what)
{
    if (!delayed(&r->c)) return FR_OK;
    if (!t || t->dtype != FR_F32 || fr_tensor_numel(t) != 1)
        return fr_node_error(r->n, FR_ERR_GRAPH, "the delayed fp8 recipe needs the %s input (float32 [1])", what);
    return FR_OK;
}

/* Where W's converted copy goes (codes or bf16 copy; fp8: its statistics and block scales). */
static void *w_codes(const lin_run *r) { return r->kept ? r->wbase + r->wp.codes : r->base + r->p.b; }
static float *w_sinv(const lin_run *r) { return (float *)(r->kept ? r->wbase + r->wp.sinv : r->base + r->p.sb); }
static fr_q_stats *w_stats(const lin_run *r) { return r->kept ? (fr_q_stats *)(r->wbase + r->wp.stats) : r->stats; }

/* 1 when W must be converted in this run (counted in weight_casts): always unless kept, and a
 * kept copy when the weights changed since it was made. Zeroes the kept statistics then. */
static fr_status w_begin(lin_run *r, int *convert)
{
    fr_cuda_ctx *cu = r->k->cu;
    if (r->kept && *r->k->persist_version == FR_CUDA_VERSION_FROZEN) { /* primed: W's float32 is gone */
        *convert = 0;
        return FR_OK;
    }
    *convert = !r->kept || *r->k->persist_version != cu->weights_version;
    if (!*convert) return FR_OK;
    cu->weight_casts++;
    if (r->kept && r->c.prec == FR_LIN_FP8) FR_CUDA_TRY(cudaMemsetAsync(w_stats(r), 0, sizeof(fr_q_stats), r->s));
    return FR_OK;
}

/* The bias the GEMM adds (*out): as given for a float32 Y, else its bf16 copy: kept ones made
 * when W's is (call before w_end: W's version decides for both), the rest every run. */
static fr_status gemm_bias(lin_run *r, const fr_tensor *b, const void **out)
{
    *out = b ? b->data : NULL;
    if (!b || !r->c.y_bf16) return FR_OK;
    const fr_cuda_ctx *cu = r->k->cu;
    const uint64_t v = *r->k->persist_version; /* kept: stale unless version is current */
    const int kept = r->b_kept && v != FR_CUDA_VERSION_FROZEN;
    *out = kept ? r->wbase + r->wp.bias : r->base + r->p.bias;
    if (kept && v == cu->weights_version) return FR_OK;
    return fr_q_to_bf16(r->s, r->n, (const float *)b->data, r->N, (void *)*out);
}

/* After the conversion was queued: the kept copy is the current weights'. */
static void w_end(lin_run *r)
{
    if (r->kept) *r->k->persist_version = r->k->cu->weights_version;
}

/* Priming (cuda_kernel.h, "Frozen weights"): W's kept copy made once from the temporary
 * device copy in k->in[1], with the same calls as the runs' conversions (so the same bytes),
 * then marked frozen: the runs never convert it again. */
static fr_status w_prime(lin_op op, const fr_cuda_kctx *k)
{
    lin_run r;
    memset(&r, 0, sizeof r);
    r.k = k;
    r.n = k->node;
    r.s = k->cu->stream;
    FR_TRY(read_cfg(r.n, &r.c));
    const fr_tensor *a = k->n_in > 0 ? k->in[0] : NULL, *w = k->n_in > 1 ? k->in[1] : NULL;
    if (!a || !w || !w->data) return fr_node_error(r.n, FR_ERR_GRAPH, "priming needs the node's weight");
    FR_TRY(node_dims(op, r.n, &r.c, a->rank, a->dims, w->rank, w->dims, 0, 0, &r.M, &r.N, &r.K));
    if (!w_kept(op, fr_cuda_weight_cache(k->cu), k->g, r.n, &r.c) || w->dtype != FR_F32)
        return fr_node_error(r.n, FR_ERR_INTERNAL, "priming a node that keeps no float32 weight's copy");
    r.kept = 1;
    make_w_plan(op, &r.c, r.N, r.K, bias_kept(op, 1, k->g, r.n, &r.c), &r.wp); /* the bias: rounded every run */
    if (!k->persist || !k->persist_version || r.wp.total > k->persist_bytes)
        return fr_node_error(r.n, FR_ERR_INTERNAL, "persistent memory of %zu bytes is smaller than the %zu planned",
                             k->persist ? k->persist_bytes : 0, r.wp.total);
    r.wbase = (char *)k->persist;
    k->cu->weight_casts++;
    const lin_cfg *c = &r.c;
    const int fwd = op == OP_FWD, trans = fwd ? !c->transB : c->transB;
    if (c->prec == FR_LIN_BF16) {
        FR_TRY(fr_q_to_bf16(r.s, r.n, (const float *)w->data, r.K * r.N, w_codes(&r)));
    } else {
        int64_t Np = fr_q_pad16(r.N), Kp = fr_q_pad16(r.K);
        fr_q_fmt f = {0, c->margin};
        fr_q_stats *wst = w_stats(&r);
        uint8_t *wop = (uint8_t *)w_codes(&r);
        FR_CUDA_TRY(cudaMemsetAsync(wst, 0, sizeof(fr_q_stats), r.s));
        if (blockwise(c)) {
            float *wsv = w_sinv(&r);
            FR_CUDA_TRY(cudaMemsetAsync(wsv, 0, (size_t)(fwd ? fr_q_blk_count(Np, Kp) : fr_q_blk_count(Kp, Np)) * 4, r.s));
            FR_TRY(fr_q_tiles128(r.s, r.n, (const float *)w->data, w->dims[0], w->dims[1], f, trans, wop, wsv, wst, 1));
        } else {
            /* per tensor, delayed included: the scale from W's own amax, the one the delayed
               recipe's history settles on for a weight that never changes (a scale_w state
               value at priming time may still be its initial guess); the runs then report
               this amax as amax_w, so the history sees a constant */
            FR_TRY(quant_tensor(&r, wst, 1, w, w->dims[0], w->dims[1], f, NULL, trans, wop, NULL, NULL, NULL, NULL));
        }
    }
    *k->persist_version = FR_CUDA_VERSION_FROZEN;
    return FR_OK;
}

static fr_status fwd_prime(const fr_cuda_kctx *k) { return w_prime(OP_FWD, k); }
static fr_status dgrad_prime(const fr_cuda_kctx *k) { return w_prime(OP_DGRAD, k); }

/* An operand given as codes [R][C] an fp8 producer wrote with the delayed scale (linear.h):
 * the GEMM's operand as they are when R and C are multiples of 16 (*op pointed at them), else
 * padded into *op; slot 0's scale_inv = 1 / scale as the quantization would have made it. */
static fr_status given_codes(lin_run *r, const fr_tensor *t, int64_t R, int64_t C, const fr_tensor *scale, fr_q_fmt f,
                             uint8_t **op)
{
    if (fr_q_pad16(R) == R && fr_q_pad16(C) == C)
        *op = (uint8_t *)t->data;
    else
        FR_TRY(fr_q_pad_codes(r->s, r->n, (const uint8_t *)t->data, R, C, *op));
    return fr_q_finalize(r->s, r->n, r->stats, 0, (const float *)scale->data, 0, f, NULL, NULL);
}

/* ---- Linear ---- */

static fr_status linear_run(const fr_cuda_kctx *k)
{
    lin_run r;
    FR_TRY(begin(OP_FWD, k, &r));
    const lin_cfg *c = &r.c;
    const fr_tensor *x = k->in[0], *w = k->in[1], *b = opt_in(k, FR_LIN_IN_B);
    fr_tensor *y = k->out[0], *xq = opt_out(k, FR_LIN_OUT_XQ), *xs = opt_out(k, FR_LIN_OUT_XQ_SINV);
    fr_tensor *ax = opt_out(k, FR_LIN_OUT_AMAX_X), *aw = opt_out(k, FR_LIN_OUT_AMAX_W);
    int64_t M = r.M, N = r.N, K = r.K;
    FR_TRY(check_out(&r, y, M, N, c->y_bf16 ? FR_BF16 : w->dtype, "Y")); /* W's dtype: X may be bfloat16 */
    if (b && (b->dtype != w->dtype || fr_tensor_numel(b) != N))
        return fr_node_error(r.n, FR_ERR_SHAPE, "bias must hold N=%lld %s values", (long long)N,
                             fr_dtype_name(w->dtype));
    const void *bias;
    FR_TRY(gemm_bias(&r, b, &bias)); /* before W's conversion: see gemm_bias */
    if (c->prec == FR_LIN_FP32)
        return float_gemm(&r, x->dtype, x->dtype, M, N, K, x->data, 0, w->data, c->transB, y->data, bias);
    if (c->prec == FR_LIN_BF16) {
        if (xs || ax || aw)
            return fr_node_error(r.n, FR_ERR_GRAPH, "outputs Xq_scale_inv, amax_x, amax_w exist in fp8 precision only");
        FR_TRY(check_out(&r, xq, M, K, FR_BF16, "Xq"));
        const void *xb; /* X rounded once, kept as Xq (a bfloat16 X as it is) */
        void *wb = w_codes(&r);
        FR_TRY(bf16_operand(&r, x, M * K, xq ? xq->data : NULL, r.base + r.p.a, &xb));
        int conv;
        FR_TRY(w_begin(&r, &conv));
        if (conv) {
            FR_TRY(fr_q_to_bf16(r.s, r.n, (const float *)w->data, K * N, wb));
            w_end(&r);
        }
        return float_gemm(&r, FR_BF16, y->dtype, M, N, K, xb, 0, wb, c->transB, y->data, bias);
    }
    /* fp8 */
    FR_TRY(check_out(&r, xq, M, K, FR_F8E4M3, "Xq"));
    FR_TRY(check_out(&r, ax, 1, 1, FR_F32, "amax_x"));
    FR_TRY(check_out(&r, aw, 1, 1, FR_F32, "amax_w"));
    if (!xq != !xs) return fr_node_error(r.n, FR_ERR_GRAPH, "outputs Xq and Xq_scale_inv come together");
    int64_t Mp = fr_q_pad16(M), Np = fr_q_pad16(N), Kp = fr_q_pad16(K);
    int64_t wr = w->dims[0], wc = w->dims[1];
    fr_q_fmt f = {0, c->margin};
    uint8_t *xop = (uint8_t *)(r.base + r.p.a), *wop = (uint8_t *)w_codes(&r);
    float *xsv = (float *)(r.base + r.p.sa), *wsv = w_sinv(&r);
    fr_q_stats *wst = w_stats(&r); /* W's slot 1 (kept across runs, or this run's) */
    int conv;
    if (blockwise(c)) {
        FR_TRY(check_out(&r, xs, fr_q_cdiv(M, 128), K, FR_F32, "Xq_scale_inv"));
        FR_TRY(w_begin(&r, &conv));
        if (conv) {
            FR_CUDA_TRY(cudaMemsetAsync(wsv, 0, (size_t)fr_q_blk_count(Np, Kp) * 4, r.s));
            FR_TRY(fr_q_tiles128(r.s, r.n, (const float *)w->data, wr, wc, f, !c->transB, wop, wsv, wst, 1));
            w_end(&r);
        }
        FR_TRY(fr_q_rows128(r.s, r.n, q_src(x), M, K, f, xop, xsv, r.stats, 0));
        if (xq) /* the weight gradient wants X in 128x1 blocks along the tokens */
            FR_TRY(fr_q_cols128(r.s, r.n, q_src(x), M, K, f, NULL, NULL, (uint8_t *)xq->data,
                                (float *)xs->data, r.stats, 0));
        if (ax) FR_TRY(fr_q_finalize(r.s, r.n, r.stats, 0, NULL, 0, f, (float *)ax->data, NULL));
        if (aw) FR_TRY(fr_q_finalize(r.s, r.n, wst, 1, NULL, 0, f, (float *)aw->data, NULL));
        return fp8_gemm(&r, Mp, Np, Kp, xop, 0, xsv, FR_GEMM_SCALE_VEC128, wop, 0, wsv, FR_GEMM_SCALE_BLK128, y, M,
                        N, bias);
    }
    FR_TRY(check_out(&r, xs, 1, 1, FR_F32, "Xq_scale_inv"));
    const fr_tensor *sx = delayed(c) ? opt_in(k, FR_LIN_IN_SCALE_X) : NULL;
    const fr_tensor *sw = delayed(c) ? opt_in(k, FR_LIN_IN_SCALE_W) : NULL;
    FR_TRY(need_scale(&r, sx, "scale_x"));
    FR_TRY(need_scale(&r, sw, "scale_w"));
    if (x->dtype == FR_F8E4M3) { /* X's codes, written with scale_x by an fp8 producer (linear.h) */
        if (xq || ax || !sx)
            return fr_node_error(r.n, FR_ERR_GRAPH, "X given as codes needs the delayed recipe's scale_x and has "
                                 "no Xq or amax_x output (its producer's)");
        FR_TRY(given_codes(&r, x, M, K, sx, f, &xop));
    } else {
        /* one read of X: the GEMM's row-major codes (scratch) and, transposed, the saved Xq [K][M] */
        FR_TRY(quant_tensor(&r, r.stats, 0, x, M, K, f, sx, 0, xop, NULL, xq ? (uint8_t *)xq->data : NULL,
                            ax ? (float *)ax->data : NULL, xs ? (float *)xs->data : NULL));
    }
    FR_TRY(w_begin(&r, &conv));
    if (conv) {
        FR_TRY(quant_tensor(&r, wst, 1, w, wr, wc, f, sw, !c->transB, wop, NULL, NULL, aw ? (float *)aw->data : NULL,
                            NULL));
        w_end(&r);
    } else if (aw) { /* the kept amax, as the conversion wrote it */
        FR_TRY(fr_q_finalize(r.s, r.n, wst, 1, NULL, 0, f, (float *)aw->data, NULL));
    }
    r.fast_accum = k->cu->fp8_fast_accum; /* as Transformer Engine and torchao: the forward only */
    return fp8_gemm(&r, Mp, Np, Kp, xop, 0, &r.stats->scale_inv[0][0], FR_GEMM_SCALE_TENSOR, wop, 0,
                    &wst->scale_inv[1][0], FR_GEMM_SCALE_TENSOR, y, M, N, bias);
}

/* ---- LinearGradData: dX [M][K] = dY [M][N] op(W)^T ---- */

static fr_status grad_data_run(const fr_cuda_kctx *k)
{
    lin_run r;
    FR_TRY(begin(OP_DGRAD, k, &r));
    const lin_cfg *c = &r.c;
    const fr_tensor *dy = k->in[0], *w = k->in[1];
    fr_tensor *dx = k->out[0], *ady = opt_out(k, 1), *dyq = opt_out(k, 2), *dyq_sinv = opt_out(k, 3);
    int64_t M = r.M, N = r.N, K = r.K;
    FR_TRY(check_out(&r, dx, M, K, c->dx_bf16 ? FR_BF16 : w->dtype, "dX")); /* the GEMM writes bf16 dX itself */
    if (c->prec == FR_LIN_BF16 ? (dyq_sinv || ady)
                               : ((dyq || dyq_sinv) && (!dyq || !dyq_sinv || c->prec != FR_LIN_FP8 || blockwise(c))))
        return fr_node_error(r.n, FR_ERR_GRAPH, "outputs dYq and dYq_scale_inv come together, with the per-tensor "
                             "fp8 recipes only; in bf16 dYq comes alone");
    /* W [K][N] (transB = 0) is used transposed, W [N][K] as stored */
    if (c->prec == FR_LIN_FP32)
        return float_gemm(&r, dy->dtype, dy->dtype, M, K, N, dy->data, 0, w->data, !c->transB, dx->data, NULL);
    if (c->prec == FR_LIN_BF16) {
        FR_TRY(check_out(&r, dyq, M, N, FR_BF16, "dYq"));
        const void *yb; /* dY rounded once, handed over (a bfloat16 dY as it is) */
        void *wb = w_codes(&r);
        FR_TRY(bf16_operand(&r, dy, M * N, dyq ? dyq->data : NULL, r.base + r.p.a, &yb));
        int conv;
        FR_TRY(w_begin(&r, &conv));
        if (conv) {
            FR_TRY(fr_q_to_bf16(r.s, r.n, (const float *)w->data, K * N, wb));
            w_end(&r);
        }
        return float_gemm(&r, FR_BF16, dx->dtype, M, K, N, yb, 0, wb, !c->transB, dx->data, NULL);
    }
    FR_TRY(check_out(&r, ady, 1, 1, FR_F32, "amax_dy"));
    int64_t Mp = fr_q_pad16(M), Np = fr_q_pad16(N), Kp = fr_q_pad16(K);
    int64_t wr = w->dims[0], wc = w->dims[1];
    fr_q_fmt fy = {dy_e5m2(c), c->margin}, fw = {0, c->margin};
    uint8_t *yop = (uint8_t *)(r.base + r.p.a), *wop = (uint8_t *)w_codes(&r);
    float *ysv = (float *)(r.base + r.p.sa), *wsv = w_sinv(&r);
    fr_q_stats *wst = w_stats(&r);
    float *amax_out = ady ? (float *)ady->data : NULL;
    int conv;
    /* W as [Kp][Np]: stored [K][N] as it is, [N][K] transposed */
    if (blockwise(c)) {
        FR_TRY(w_begin(&r, &conv));
        if (conv) {
            FR_CUDA_TRY(cudaMemsetAsync(wsv, 0, (size_t)fr_q_blk_count(Kp, Np) * 4, r.s));
            FR_TRY(fr_q_tiles128(r.s, r.n, (const float *)w->data, wr, wc, fw, c->transB, wop, wsv, wst, 1));
            w_end(&r);
        }
        FR_TRY(fr_q_rows128(r.s, r.n, q_src(dy), M, N, fy, yop, ysv, r.stats, 0));
        if (amax_out) FR_TRY(fr_q_finalize(r.s, r.n, r.stats, 0, NULL, 0, fy, amax_out, NULL));
        return fp8_gemm(&r, Mp, Kp, Np, yop, dy_e5m2(c), ysv, FR_GEMM_SCALE_VEC128, wop, 0, wsv,
                        FR_GEMM_SCALE_BLK128, dx, M, K, NULL);
    }
    const fr_tensor *sw = delayed(c) ? opt_in(k, 2) : NULL, *sdy = delayed(c) ? opt_in(k, 3) : NULL;
    FR_TRY(need_scale(&r, sw, "scale_w"));
    FR_TRY(need_scale(&r, sdy, "scale_dy"));
    if (dyq) {
        FR_TRY(check_out(&r, dyq, N, M, dy_e5m2(c) ? FR_F8E5M2 : FR_F8E4M3, "dYq"));
        FR_TRY(check_out(&r, dyq_sinv, 1, 1, FR_F32, "dYq_scale_inv"));
    }
    if (dy->dtype == FR_F8E5M2 || dy->dtype == FR_F8E4M3) { /* dY's codes from an fp8 producer (linear.h) */
        if (dyq || ady || !sdy || dy->dtype != (dy_e5m2(c) ? FR_F8E5M2 : FR_F8E4M3))
            return fr_node_error(r.n, FR_ERR_GRAPH, "dY given as codes needs the delayed recipe's scale_dy, the dY "
                                 "format, and no dYq or amax_dy output (its producer's)");
        FR_TRY(given_codes(&r, dy, M, N, sdy, fy, &yop));
    } else {
        /* one read of dY: the codes for this GEMM and, transposed, for the weight gradient's */
        FR_TRY(quant_tensor(&r, r.stats, 0, dy, M, N, fy, sdy, 0, yop, NULL, dyq ? (uint8_t *)dyq->data : NULL,
                            amax_out, dyq_sinv ? (float *)dyq_sinv->data : NULL));
    }
    FR_TRY(w_begin(&r, &conv));
    if (conv) {
        FR_TRY(quant_tensor(&r, wst, 1, w, wr, wc, fw, sw, c->transB, wop, NULL, NULL, NULL, NULL));
        w_end(&r);
    }
    return fp8_gemm(&r, Mp, Kp, Np, yop, dy_e5m2(c), &r.stats->scale_inv[0][0], FR_GEMM_SCALE_TENSOR, wop, 0,
                    &wst->scale_inv[1][0], FR_GEMM_SCALE_TENSOR, dx, M, K, NULL);
}

/* ---- LinearGradWeight: dW = X^T dY [K][N] (transB = 0) or dY^T X [N][K] ---- */

/* A handed-over per-tensor scale_inv (the saved Xq's, dYq's) as cuBLASLt reads it: in place when
 * 16-byte aligned (no copy launched), else copied into slot `slot` of the node's statistics. */
static fr_status aligned_sinv(lin_run *r, const float *given, int slot, const float **out)
{
    if ((uintptr_t)given % 16 == 0) {
        *out = given;
        return FR_OK;
    }
    FR_CUDA_TRY(cudaMemcpyAsync(&r->stats->scale_inv[slot][0], given, sizeof(float), cudaMemcpyDeviceToDevice, r->s));
    *out = &r->stats->scale_inv[slot][0];
    return FR_OK;
}

static fr_status grad_weight_run(const fr_cuda_kctx *k)
{
    lin_run r;
    FR_TRY(begin(OP_WGRAD, k, &r));
    const lin_cfg *c = &r.c;
    const fr_tensor *xs = k->in[0], *dy = k->in[1], *s2 = opt_in(k, 2);
    fr_tensor *dw = k->out[0], *ady = opt_out(k, 1);
    int64_t M = r.M, N = r.N, K = r.K;
    int tb = c->transB;
    int dyq = is_fp8_type(dy->dtype); /* dY^T codes [N][M] from the data gradient */
    if (fr_tensor_numel(xs) != M * K * (c->x_glu >= 0 ? 2 : 1))
        return fr_node_error(r.n, FR_ERR_SHAPE, "input and output gradient differ in tokens");
    if (k->cu->accumulate_out) {
        /* the caller planned dW as an accumulator only for nodes whose GEMM writes it whole and
           directly (a padded result or a float64 one would add the copy-out, not the GEMM) */
        if (!fr_cuda_wgrad_accumulable(k->g, r.n) || dw->dtype != FR_F32)
            return fr_node_error(r.n, FR_ERR_INTERNAL,
                                 "asked to accumulate into dW, which this node cannot do in "
                                 "its GEMM (a bug in fp8run)");
        r.beta = 1.0;
        k->cu->wgrad_accumulated++;
    }
    FR_TRY(check_out(&r, dw, tb ? N : K, tb ? K : N, is_low_type(dy->dtype) ? FR_F32 : dy->dtype, "dW"));
    if (dyq && (c->prec != FR_LIN_FP8 || blockwise(c) || ady))
        return fr_node_error(r.n, FR_ERR_UNSUPPORTED, "a quantized output gradient needs a per-tensor fp8 recipe "
                             "(and no amax_dy output)");
    if (dyq && dy->dtype != (dy_e5m2(c) ? FR_F8E5M2 : FR_F8E4M3)) /* the GEMM reads the codes in that format */
        return fr_node_error(r.n, FR_ERR_UNSUPPORTED, "the quantized output gradient (input 1) is %s, the node's dY "
                             "format %s", fr_dtype_name(dy->dtype), fr_dtype_name(dy_e5m2(c) ? FR_F8E5M2 : FR_F8E4M3));
    int saved = xs->dtype == FR_F8E4M3;
    if (saved && c->prec != FR_LIN_FP8)
        return fr_node_error(r.n, FR_ERR_UNSUPPORTED, "a saved float8e4m3fn input needs fp8 precision");
    if ((xs->dtype == FR_BF16 || dy->dtype == FR_BF16) && (c->prec == FR_LIN_FP32 || (c->prec == FR_LIN_BF16 && ady)))
        return fr_node_error(r.n, FR_ERR_UNSUPPORTED, "bfloat16 inputs need bf16 precision (and no amax_dy output) "
                             "or fp8");
    if (c->prec == FR_LIN_FP32) {
        if (tb) return float_gemm(&r, dy->dtype, dy->dtype, N, K, M, dy->data, 1, xs->data, 0, dw->data, NULL);
        return float_gemm(&r, dy->dtype, dy->dtype, K, N, M, xs->data, 1, dy->data, 0, dw->data, NULL);
    }
    if (c->prec == FR_LIN_BF16) {
        /* the forward's Xq and the data gradient's dYq are the operands as they are */
        void *xb = xs->dtype == FR_BF16 ? xs->data : r.base + r.p.a;
        void *yb = dy->dtype == FR_BF16 ? dy->data : r.base + r.p.b;
        if (xs->dtype != FR_BF16) FR_TRY(fr_q_to_bf16(r.s, r.n, (const float *)xs->data, M * K, xb));
        if (dy->dtype != FR_BF16) FR_TRY(fr_q_to_bf16(r.s, r.n, (const float *)dy->data, M * N, yb));
        if (tb) return float_gemm(&r, FR_BF16, FR_F32, N, K, M, yb, 1, xb, 0, dw->data, NULL);
        return float_gemm(&r, FR_BF16, FR_F32, K, N, M, xb, 1, yb, 0, dw->data, NULL);
    }
    FR_TRY(check_out(&r, ady, 1, 1, FR_F32, "amax_dy"));
    int64_t Mp = fr_q_pad16(M), Np = fr_q_pad16(N), Kp = fr_q_pad16(K);
    fr_q_fmt fx = {0, c->margin}, fy = {dy_e5m2(c), c->margin};
    /* operand buffers: X^T [Kp][Mp], dY^T [Np][Mp] (the plan's a/b follow the GEMM's order) */
    uint8_t *xop = (uint8_t *)(r.base + (tb ? r.p.b : r.p.a)), *yop = (uint8_t *)(r.base + (tb ? r.p.a : r.p.b));
    float *xsv = (float *)(r.base + (tb ? r.p.sb : r.p.sa)), *ysv = (float *)(r.base + (tb ? r.p.sa : r.p.sb));
    float *amax_out = ady ? (float *)ady->data : NULL;
    const float *x_sinv, *y_sinv;
    fr_gemm_scale mode;
    if (saved) {
        int64_t want = blockwise(c) ? fr_q_cdiv(M, 128) * K : 1;
        if (!s2 || s2->dtype != FR_F32 || fr_tensor_numel(s2) != want)
            return fr_node_error(r.n, FR_ERR_SHAPE, "the saved input needs its scale_inv as input 2");
        if (blockwise(c)) /* X's shape [M][K]: transposed here */
            FR_TRY(fr_q_transpose_codes(r.s, r.n, (const uint8_t *)xs->data, M, K, xop));
        else if (Mp == M && Kp == K) /* X^T [K][M] as the forward saved it: the operand itself (no scratch planned) */
            xop = (uint8_t *)xs->data;
        else
            FR_TRY(fr_q_pad_codes(r.s, r.n, (const uint8_t *)xs->data, K, M, xop));
    }
    if (blockwise(c)) {
        mode = FR_GEMM_SCALE_VEC128;
        if (saved)
            FR_TRY(fr_q_pad_grid(r.s, r.n, (const float *)s2->data, fr_q_cdiv(M, 128), K, Kp, xsv));
        else
            FR_TRY(fr_q_cols128(r.s, r.n, q_src(xs), M, K, fx, xop, xsv, NULL, NULL, r.stats, 0));
        FR_TRY(fr_q_cols128(r.s, r.n, q_src(dy), M, N, fy, yop, ysv, NULL, NULL, r.stats, 1));
        if (amax_out) FR_TRY(fr_q_finalize(r.s, r.n, r.stats, 1, NULL, 0, fy, amax_out, NULL));
        x_sinv = xsv;
        y_sinv = ysv;
    } else {
        mode = FR_GEMM_SCALE_TENSOR;
        const fr_tensor *sdy = delayed(c) && !dyq ? opt_in(k, 3) : NULL;
        if (!dyq) FR_TRY(need_scale(&r, sdy, "scale_dy"));
        if (saved) { /* its scale_inv as it is, or copied to a 16-byte aligned place for cuBLASLt */
            FR_TRY(aligned_sinv(&r, (const float *)s2->data, 0, &x_sinv));
        } else if (c->x_glu >= 0) { /* X remade from the GLU's gate_up in the quantization pass */
            const fr_tensor *sx = delayed(c) ? s2 : NULL;
            FR_TRY(need_scale(&r, sx, "scale_x"));
            const fr_q_glu gx = {xs->data, xs->dtype == FR_BF16, c->x_glu, c->x_glu_bf16};
            const float *given = sx ? (const float *)sx->data : NULL;
            if (!given) /* current: X's amax first (codes overwritten below) */
                FR_TRY(fr_q_glu_t(r.s, r.n, gx, M, K, NULL, fx, xop, r.stats, 0));
            FR_TRY(fr_q_finalize(r.s, r.n, r.stats, 0, given, !given, fx, NULL, NULL));
            FR_TRY(fr_q_glu_t(r.s, r.n, gx, M, K, given ? given : &r.stats->scale[0], fx, xop, r.stats, -1));
            x_sinv = &r.stats->scale_inv[0][0];
        } else {
            const fr_tensor *sx = delayed(c) ? s2 : NULL;
            FR_TRY(need_scale(&r, sx, "scale_x"));
            FR_TRY(quant_tensor(&r, r.stats, 0, xs, M, K, fx, sx, 1, xop, NULL, NULL, NULL, NULL));
            x_sinv = &r.stats->scale_inv[0][0];
        }
        if (dyq) {
            const fr_tensor *ys = opt_in(k, 3);
            if (!ys || ys->dtype != FR_F32 || fr_tensor_numel(ys) != 1)
                return fr_node_error(r.n, FR_ERR_SHAPE, "the quantized output gradient needs its scale_inv as input 3");
            if (fr_q_pad16(M) == M && fr_q_pad16(N) == N) /* already the GEMM's operand (the plan gave no scratch) */
                yop = (uint8_t *)dy->data;
            else
                FR_TRY(fr_q_pad_codes(r.s, r.n, (const uint8_t *)dy->data, N, M, yop));
            FR_TRY(aligned_sinv(&r, (const float *)ys->data, 1, &y_sinv));
        } else {
            FR_TRY(quant_tensor(&r, r.stats, 1, dy, M, N, fy, sdy, 1, yop, NULL, NULL, amax_out, NULL));
            y_sinv = &r.stats->scale_inv[1][0];
        }
    }
    if (tb)
        return fp8_gemm(&r, Np, Kp, Mp, yop, dy_e5m2(c), y_sinv, mode, xop, 0, x_sinv, mode, dw, N, K, NULL);
    return fp8_gemm(&r, Kp, Np, Mp, xop, 0, x_sinv, mode, yop, dy_e5m2(c), y_sinv, mode, dw, K, N, NULL);
}

extern "C" int fr_cuda_wgrad_accumulable(const fr_graph *g, const fr_node *n)
{
    if (!g || !n || n->dead || strcmp(n->op_type, "LinearGradWeight") != 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0)
        return 0;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return 0;
    lin_cfg c;
    if (read_cfg(n, &c) != FR_OK) return 0;
    const fr_value *x = &g->values[n->inputs[0]], *dy = &g->values[n->inputs[1]], *dw = &g->values[n->outputs[0]];
    if (dw->dtype != FR_F32) return 0;
    if (c.prec == FR_LIN_FP32) return x->dtype == FR_F32 && dy->dtype == FR_F32;
    if (c.prec == FR_LIN_BF16) return 1;
    if (blockwise(&c)) return 0;
    int64_t M, N, K;
    const int dyq = is_fp8_type(dy->dtype), xqt = saved_t(&c, x->dtype);
    if (node_dims(OP_WGRAD, n, &c, x->rank, x->dims, dy->rank, dy->dims, dyq, xqt, &M, &N, &K) != FR_OK) return 0;
    /* the result [K][N] or [N][K] unpadded: the GEMM writes dW itself, not a padded copy */
    return fr_q_pad16(N) == N && fr_q_pad16(K) == K;
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_linear[] = {
    {"Linear", FR_DOMAIN_FP8RUN, linear_run, NULL, fwd_persist, fwd_scratch, 1, fwd_prime},
    {"LinearGradData", FR_DOMAIN_FP8RUN, grad_data_run, NULL, dgrad_persist, dgrad_scratch, 1, dgrad_prime},
    {"LinearGradWeight", FR_DOMAIN_FP8RUN, grad_weight_run, NULL, NULL, wgrad_scratch},
    {NULL, NULL, NULL, NULL, NULL},
};
