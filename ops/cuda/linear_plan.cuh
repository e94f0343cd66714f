/* The linear family's plan-time layouts (included by ops/cuda/linear.cu only): the attributes
 * as the CPU reads them, M/N/K from the input shapes, the node's scratch (lin_plan) and the
 * weight cache's persistent memory (w_plan), and the scratch / persist callbacks built on them.
 * See linear.cu for what the buffers hold and when they are written. */
#ifndef FR_CUDA_LINEAR_PLAN_CUH
#define FR_CUDA_LINEAR_PLAN_CUH

#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/quantize.cuh"

extern "C" {
#include "ops/linear.h"
}

/* ---- attributes: read as the CPU kernels read them (fr_lin_read_attrs, ops/linear.c) ---- */

typedef fr_lin_attrs lin_cfg;

static FR_NODISCARD fr_status read_cfg(const fr_node *n, lin_cfg *c) { return fr_lin_read_attrs(n, c); }
static int dy_e5m2(const lin_cfg *c) { return c->dy_fmt == FR_F8E5M2; }
static int delayed(const lin_cfg *c) { return c->prec == FR_LIN_FP8 && c->recipe == FR_LIN_DELAYED; }
static int blockwise(const lin_cfg *c) { return c->prec == FR_LIN_FP8 && c->recipe == FR_LIN_BLOCKWISE; }

/* ---- scratch plans ---- */

static size_t take(size_t *cur, int64_t bytes)
{
    size_t o = (*cur + 255) & ~(size_t)255;
    *cur = o + (size_t)(bytes > 0 ? bytes : 0);
    return o;
}

/* Offsets in the node's scratch. a, b: the GEMM's operands (bf16 copies or fp8 codes); sa, sb:
 * their block scales; d: the padded fp8 result, or the float32 result a bias is added to before
 * the rounding to a bfloat16 Y when cuBLASLt refuses the bias epilogue; bias: its bf16 copy. */
typedef struct lin_plan {
    size_t stats, a, b, sa, sb, d, bias, total;
    int padded;
} lin_plan;

/* A fp8 GEMM C [Mg][Ng] = A [Mg][Kg] B [Ng][Kg]^T with block scales of the given modes;
 * out_rows x out_cols: the unpadded result. a_given / b_kept: that operand's codes are
 * elsewhere (a tensor of the node, W's persistent memory): no scratch for them. */
static void plan_fp8(int64_t Mg, int64_t Ng, int64_t Kg, fr_gemm_scale ma, fr_gemm_scale mb, int64_t out_rows,
                     int64_t out_cols, int a_given, int b_kept, int f32_out, lin_plan *p, size_t *cur)
{
    p->stats = take(cur, sizeof(fr_q_stats));
    if (!a_given) p->a = take(cur, Mg * Kg);
    if (!b_kept) p->b = take(cur, Ng * Kg); /* else W's codes live in persistent memory */
    if (ma == FR_GEMM_SCALE_VEC128) p->sa = take(cur, fr_q_cdiv(Kg, 128) * Mg * 4);
    if (mb == FR_GEMM_SCALE_VEC128) p->sb = take(cur, fr_q_cdiv(Kg, 128) * Ng * 4);
    if (mb == FR_GEMM_SCALE_BLK128 && !b_kept) p->sb = take(cur, fr_q_blk_count(Ng, Kg) * 4);
    p->padded = Mg != out_rows || Ng != out_cols;
    if (p->padded || f32_out) p->d = take(cur, Mg * Ng * 4);
}

typedef enum { OP_FWD, OP_DGRAD, OP_WGRAD } lin_op;

/* The plan of op `op` with tokens M, input features K, output features N; dyq / xqt: the weight
 * gradient reads the handed-over dY^T / saved X^T codes (no scratch for them unless padded).
 * bf16: a_given / b_given: that operand's bf16 copy is a tensor of the node (an output it
 * rounds into, or a bf16 input), so it needs no scratch. w_kept: W's converted copy (the
 * operand b of the forward and the data gradient) lives in persistent memory (w_plan).
 * bias_bf16: a forward with a bias and a bfloat16 Y (its bf16 copy, the fallback's result). */
static void make_plan(lin_op op, const lin_cfg *c, int64_t M, int64_t N, int64_t K, int dyq, int xqt, int a_given,
                      int b_given, int w_kept, int bias_bf16, lin_plan *p)
{
    if (op != OP_FWD) bias_bf16 = 0;
    if (op == OP_WGRAD) w_kept = 0;
    if (w_kept) b_given = 1;
    memset(p, 0, sizeof *p);
    size_t cur = 0;
    int64_t Mp = fr_q_pad16(M), Np = fr_q_pad16(N), Kp = fr_q_pad16(K);
    int blk = blockwise(c);
    fr_gemm_scale vec = blk ? FR_GEMM_SCALE_VEC128 : FR_GEMM_SCALE_TENSOR;
    fr_gemm_scale wmode = blk ? FR_GEMM_SCALE_BLK128 : FR_GEMM_SCALE_TENSOR;
    if (c->prec == FR_LIN_BF16) {
        /* bf16 copies of the two operands */
        int64_t na = op == OP_DGRAD ? M * N : M * K, nb = op == OP_WGRAD ? M * N : K * N;
        p->a = take(&cur, a_given ? 0 : na * 2);
        p->b = take(&cur, b_given ? 0 : nb * 2);
        if (bias_bf16) p->d = take(&cur, M * N * 4);
    } else if (c->prec == FR_LIN_FP8) {
        /* the weight gradient's handed-over dY^T / X^T codes are its operands as they are when unpadded */
        const int dy_given = op == OP_WGRAD && dyq && Mp == M && Np == N;
        const int x_given = op == OP_WGRAD && xqt && Mp == M && Kp == K;
        if (op == OP_FWD) /* Y [M][N] = X [M][K] . W [N][K]^T */
            plan_fp8(Mp, Np, Kp, vec, wmode, M, N, 0, w_kept, bias_bf16, p, &cur);
        else if (op == OP_DGRAD) /* dX [M][K] = dY [M][N] . W [K][N]^T */
            plan_fp8(Mp, Kp, Np, vec, wmode, M, K, 0, w_kept, 0, p, &cur);
        else if (!c->transB) /* dW [K][N] = X^T [K][M] . dY^T [N][M]^T */
            plan_fp8(Kp, Np, Mp, vec, vec, K, N, x_given, dy_given, 0, p, &cur);
        else /* dW [N][K] = dY^T [N][M] . X^T [K][M]^T */
            plan_fp8(Np, Kp, Mp, vec, vec, N, K, dy_given, x_given, 0, p, &cur);
    }
    if (bias_bf16) p->bias = take(&cur, N * 2); /* also when kept: frozen nodes use it */
    p->total = cur;
}

static int64_t lead(int rank, const int64_t *dims)
{
    int64_t m = 1;
    for (int d = 0; d + 1 < rank; d++) m *= dims[d];
    return m;
}

static int64_t last(int rank, const int64_t *dims) { return rank ? dims[rank - 1] : 1; }

/* M, N, K of a node from the shapes of its inputs (graph values or tensors). */
static int is_fp8_type(fr_dtype t) { return t == FR_F8E4M3 || t == FR_F8E5M2; }
static int is_low_type(fr_dtype t) { return is_fp8_type(t) || t == FR_BF16; } /* a converted copy */
/* a weight gradient's input 0 is the forward's saved per-tensor codes, X^T [K][M] */
static int saved_t(const lin_cfg *c, fr_dtype x) { return x == FR_F8E4M3 && c->prec == FR_LIN_FP8 && !blockwise(c); }

/* bf16: which GEMM operands (a, b in the plan's order) are tensors of the node already:
 * the forward's Xq output or bfloat16 X, the data gradient's dYq output or bfloat16 dY, the
 * weight gradient's bf16 inputs (x_bf16: input 0, y_bf16: input 1). */
static void bf16_given(lin_op op, const lin_cfg *c, int has_out, int x_bf16, int y_bf16, int *a, int *b)
{
    *a = *b = 0;
    if (c->prec != FR_LIN_BF16) return;
    if (op == OP_FWD || op == OP_DGRAD)
        *a = has_out || x_bf16;
    else { /* the plan's a holds X, b holds dY (see grad_weight_run) */
        *a = x_bf16;
        *b = y_bf16;
    }
}

static FR_NODISCARD fr_status node_dims(lin_op op, const fr_node *n, const lin_cfg *c, int r0, const int64_t *d0,
                                        int r1, const int64_t *d1, int dyq, int xqt, int64_t *M, int64_t *N, int64_t *K)
{
    if (r0 < 1 || r1 < 1) return fr_node_error(n, FR_ERR_SHAPE, "inputs must have rank >= 1");
    if (op == OP_WGRAD) { /* (Xs [..., K] or Xq [K][M], dY [..., N]) or (Xs, dYq [N][M]) */
        if ((dyq && r1 != 2) || (xqt && r0 != 2))
            return fr_node_error(n, FR_ERR_SHAPE, "the quantized output gradient / saved input codes must be 2-D");
        *M = dyq ? d1[1] : lead(r1, d1);
        *N = dyq ? d1[0] : last(r1, d1);
        *K = xqt ? d0[0] : last(r0, d0);
        if (c->x_glu >= 0) *K /= 2; /* Xs is the GLU's gate_up [..., 2K] */
        return FR_OK;
    }
    if (r1 != 2) return fr_node_error(n, FR_ERR_SHAPE, "the weight must be 2-D");
    *K = c->transB ? d1[1] : d1[0];
    *N = c->transB ? d1[0] : d1[1];
    *M = lead(r0, d0);
    int64_t want = op == OP_FWD ? *K : *N;
    if (last(r0, d0) != want)
        return fr_node_error(n, FR_ERR_SHAPE, "input's last dim %lld does not match the weight (want %lld)",
                             (long long)last(r0, d0), (long long)want);
    return FR_OK;
}

/* ---- the weight cache (see the top of the file) ---- */

static int is_constant(const fr_graph *g, const fr_node *n, int slot)
{
    return slot < n->n_inputs && n->inputs[slot] >= 0 && g->values[n->inputs[slot]].constant != NULL;
}

/* Whether the node keeps W's converted copy across runs: with the weight cache on (`cache`:
 * cuda_kernel.h), a bf16/fp8 forward or data gradient whose W (and scale_w in the delayed
 * recipe) are constants, which only the trainer changes. */
static int w_kept(lin_op op, int cache, const fr_graph *g, const fr_node *n, const lin_cfg *c)
{
    if (!cache || op == OP_WGRAD || c->prec == FR_LIN_FP32 || !is_constant(g, n, 1)) return 0;
    if (fr_tensor_numel(g->values[n->inputs[1]].constant) == 0) return 0; /* nothing to keep */
    return !delayed(c) || is_constant(g, n, op == OP_FWD ? FR_LIN_IN_SCALE_W : 2);
}

/* A kept forward keeps its bias's bf16 copy too: a bfloat16 Y and a constant bias. */
static int bias_kept(lin_op op, int cache, const fr_graph *g, const fr_node *n, const lin_cfg *c)
{
    return op == OP_FWD && c->y_bf16 && is_constant(g, n, FR_LIN_IN_B) && w_kept(op, cache, g, n, c);
}

/* Offsets in the node's persistent memory: fp8: the statistics (slot 1: W's amax, scale,
 * scale_inv), W's padded codes as the GEMM reads them, its 128x128 block scales (block recipe);
 * bf16: W's bf16 copy; then the bias's bf16 copy when kept (b_kept). */
typedef struct w_plan {
    size_t stats, codes, sinv, bias, total;
} w_plan;

static void make_w_plan(lin_op op, const lin_cfg *c, int64_t N, int64_t K, int b_kept, w_plan *p)
{
    memset(p, 0, sizeof *p);
    size_t cur = 0;
    if (c->prec == FR_LIN_BF16) {
        p->codes = take(&cur, K * N * 2);
    } else {
        int64_t Np = fr_q_pad16(N), Kp = fr_q_pad16(K);
        p->stats = take(&cur, sizeof(fr_q_stats));
        p->codes = take(&cur, Np * Kp);
        /* the forward reads W as [Np][Kp], the data gradient as [Kp][Np] */
        if (blockwise(c)) p->sinv = take(&cur, (op == OP_FWD ? fr_q_blk_count(Np, Kp) : fr_q_blk_count(Kp, Np)) * 4);
    }
    if (b_kept) p->bias = take(&cur, N * 2);
    p->total = cur;
}

static FR_NODISCARD fr_status persist_of(lin_op op, const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                         size_t *bytes)
{
    *bytes = 0;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs");
    if (!w_kept(op, env->weight_cache, g, n, &c)) return FR_OK;
    const fr_value *v0 = &g->values[n->inputs[0]], *v1 = &g->values[n->inputs[1]];
    int64_t M, N, K;
    FR_TRY(node_dims(op, n, &c, v0->rank, v0->dims, v1->rank, v1->dims, 0, 0, &M, &N, &K));
    w_plan p;
    make_w_plan(op, &c, N, K, bias_kept(op, env->weight_cache, g, n, &c), &p);
    *bytes = p.total;
    return FR_OK;
}

static FR_NODISCARD fr_status fwd_persist(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *b)
{
    return persist_of(OP_FWD, env, g, n, b);
}
static FR_NODISCARD fr_status dgrad_persist(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                            size_t *b)
{
    return persist_of(OP_DGRAD, env, g, n, b);
}

static FR_NODISCARD fr_status scratch_of(lin_op op, const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                         size_t *bytes)
{
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs");
    const fr_value *v0 = &g->values[n->inputs[0]], *v1 = &g->values[n->inputs[1]];
    int64_t M, N, K;
    int dyq = op == OP_WGRAD && is_fp8_type(v1->dtype), xqt = op == OP_WGRAD && saved_t(&c, v0->dtype);
    FR_TRY(node_dims(op, n, &c, v0->rank, v0->dims, v1->rank, v1->dims, dyq, xqt, &M, &N, &K));
    int out_slot = op == OP_FWD ? FR_LIN_OUT_XQ : 2, ga, gb;
    int has_out = op != OP_WGRAD && out_slot < n->n_outputs && n->outputs[out_slot] >= 0;
    bf16_given(op, &c, has_out, v0->dtype == FR_BF16, v1->dtype == FR_BF16, &ga, &gb);
    int has_bias = n->n_inputs > FR_LIN_IN_B && n->inputs[FR_LIN_IN_B] >= 0;
    lin_plan p;
    make_plan(op, &c, M, N, K, dyq, xqt, ga, gb, w_kept(op, env->weight_cache, g, n, &c), has_bias && c.y_bf16, &p);
    *bytes = p.total;
    return FR_OK;
}

static FR_NODISCARD fr_status fwd_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *b)
{
    return scratch_of(OP_FWD, env, g, n, b);
}
static FR_NODISCARD fr_status dgrad_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                            size_t *b)
{
    return scratch_of(OP_DGRAD, env, g, n, b);
}
static FR_NODISCARD fr_status wgrad_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                            size_t *b)
{
    return scratch_of(OP_WGRAD, env, g, n, b);
}

#endif
