/* CUDA kernels of SwiGLUQuantize and SwiGLUGradQuantize (ops/swiglu.h).
 *
 * SwiGLUQuantize: the one-input SwiGLU's y, computed with the
 * SwiGLU kernels' own math (glu_act.cuh) and rounded as they store it, quantized to E4M3 with
 * the delayed scale as the Linear's quantization does (quantize_util.cuh), and its amax: one
 * read of gate_up, the codes written, the bfloat16 y never. Vector path (F a multiple of the
 * 16-byte vector's V and 16-byte aligned rows): 16-byte loads of gate and up, 4 or 8 codes a
 * store; else one element per thread. The amax is reduced per block (at most one wave of blocks)
 * with one atomicMax on the output's bits, then NaN bits canonicalized as fr_amax returns them.
 *
 * SwiGLUGradQuantize: d_gate_up computed with SwiGLUGrad's math (glu_act.cuh's bwd1) and rounded
 * as its store rounds, quantized with the delayed scale into the row-major codes and, in the same
 * pass, the transposed codes (through a 128 x 128 tile as the Linear's cast-transpose,
 * cast_transpose.cuh): gate, up and dy read once, each thread making an element's dgate and dup
 * from one act(g). bfloat16 gate_up and dy (the narrowed training graph) with rows of 16 and F of
 * 64 take the tiles; any other shape or dtype goes element by element (correct, not fast: the
 * pass rewrites only what the tiles take). */
#include "ops/cuda/glu_act.cuh"
#include "ops/cuda/quantize_util.cuh"
#include "ops/cuda/cast_transpose.cuh"

namespace {

template <int ACT, typename T> __global__ void quant_vec(const T *__restrict__ gu, int64_t rows, int64_t F,
                                                         const float *scale_ptr, int y_bf16,
                                                         uint8_t *__restrict__ codes, unsigned *amax)
{
    constexpr int V = q_vec<T>::n, W = V / 4;
    __shared__ unsigned red[32];
    const float s = *scale_ptr;
    const int64_t Fv = F / V, nv = rows * Fv;
    unsigned m = 0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < nv; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / Fv;
        const T *g = gu + r * 2 * F + (e - r * Fv) * V;
        const uint4 gv = *(const uint4 *)g, uv = *(const uint4 *)(g + F);
        float fg[V], fu[V], x[V];
        q_vec<T>::get(gv, fg);
        q_vec<T>::get(uv, fu);
#pragma unroll
        for (int j = 0; j < V; j++) {
            x[j] = fr_glu::x_of<ACT>(fg[j], fu[j], y_bf16);
            m = max(m, abs_bits(x[j]));
        }
        uint32_t q[W];
#pragma unroll
        for (int k = 0; k < W; k++) q[k] = quantize4(x + 4 * k, s, 0);
        store_codes<W>(codes + e * V, q);
    }
    block_atomic_max(amax, m, red);
}

template <int ACT, typename T> __global__ void quant_one(const T *gu, int64_t rows, int64_t F, const float *scale_ptr,
                                                         int y_bf16, uint8_t *codes, unsigned *amax)
{
    __shared__ unsigned red[32];
    const float s = *scale_ptr;
    unsigned m = 0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * F;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / F, o = r * 2 * F + (e - r * F);
        const float x = fr_glu::x_of<ACT>(ld_f(gu, o), ld_f(gu, o + F), y_bf16);
        m = max(m, abs_bits(x));
        codes[e] = quantize(x, s, 0);
    }
    block_atomic_max(amax, m, red);
}

__global__ void canonical_amax(unsigned *amax)
{
    if (*amax > INF_BITS) *amax = NAN_BITS;
}

/* At most the blocks of `kernel` the device holds at once (one wave; the amax's atomics
 * serialize, so never more): its register count decides how many fit a multiprocessor (the
 * vector kernel's 37 registers fit 6 blocks of 256, not the 8 wave_blocks assumes). On an H200
 * this changed nothing measurable (0.165 ms at the 1B shape either way, against SwiGLU's 0.148:
 * the kernel is held back by the activation's math, not by a partial second wave). Read once
 * per instantiation. */
template <typename K> static unsigned resident_blocks(K kernel, int64_t work)
{
    static int64_t wave; /* a benign race: every thread writes the same value */
    if (fr_cuda_quant_blocks()) return wave_blocks(work, 256); /* the context's cap (tests) */
    if (!wave) {
        int dev = 0, sms = 0, per = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, 256, 0) != cudaSuccess || per < 1 || sms < 1)
            return wave_blocks(work, 256);
        wave = (int64_t)sms * per;
    }
    const int64_t b = (work + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b < wave ? b : wave);
}

template <int ACT, typename T> void launch(cudaStream_t st, const T *gu, int64_t rows, int64_t F, const float *scale,
                                           int y_bf16, uint8_t *codes, unsigned *amax)
{
    constexpr int V = q_vec<T>::n;
    if (F % V == 0 && aligned16(gu) && aligned16(codes)) { /* 2F-element rows keep every load aligned */
        const unsigned nb = resident_blocks(quant_vec<ACT, T>, rows * F / V);
        quant_vec<ACT, T><<<nb, 256, 0, st>>>(gu, rows, F, scale, y_bf16, codes, amax);
    } else {
        const unsigned nb = resident_blocks(quant_one<ACT, T>, rows * F);
        quant_one<ACT, T><<<nb, 256, 0, st>>>(gu, rows, F, scale, y_bf16, codes, amax);
    }
}

template <typename T> void launch_act(cudaStream_t st, int act, const T *gu, int64_t rows, int64_t F,
                                      const float *scale, int y_bf16, uint8_t *codes, unsigned *amax)
{
    if (act == FR_GLU_GELU_TANH)
        launch<FR_GLU_GELU_TANH>(st, gu, rows, F, scale, y_bf16, codes, amax);
    else if (act == FR_GLU_GELU)
        launch<FR_GLU_GELU>(st, gu, rows, F, scale, y_bf16, codes, amax);
    else
        launch<FR_GLU_SILU>(st, gu, rows, F, scale, y_bf16, codes, amax);
}

/* ---- SwiGLUGradQuantize ---- */

/* 128 rows x 64 of F a tile, both bfloat16 (gate_up and dy), F a multiple of 64, rows of 16:
 * thread (tj = tid % 8, tr = tid / 8) makes dgate and dup of 8 columns j of rows tr + 32 p (four
 * passes, two at a time with their 3 x 16-byte loads in flight), one act(g) for both; writes
 * their codes row-major (8 bytes each half) and into the tile, gate columns 0..63 and up 64..127,
 * which store_transposed writes to codes_t's rows j and F + j. */
#define GQ_J 64
template <int ACT>
__global__ void __launch_bounds__(256, CT_MIN_BLOCKS)
    gq_tiles(const __nv_bfloat16 *__restrict__ gu, const __nv_bfloat16 *__restrict__ dy, int64_t R, int64_t F,
             int dx_bf16, const float *scale_ptr, int e5m2, uint8_t *__restrict__ codes, uint8_t *codes_t, unsigned *amax)
{
    __shared__ uint32_t tile[CT_TILE][CT_TILE / 4];
    __shared__ unsigned red[32];
    const float s = *scale_ptr;
    const int tid = threadIdx.x, tj = tid & 7, tr = tid >> 3;
    const int64_t tcols = F / GQ_J, ntiles = (R + CT_TILE - 1) / CT_TILE * tcols;
    unsigned m = 0;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t r0 = t / tcols * CT_TILE, j = t % tcols * GQ_J + tj * 8;
#pragma unroll
        for (int p0 = 0; p0 < 4; p0 += 2) {
            uint4 g[2], u[2], d[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int64_t r = r0 + tr + 32 * (p0 + i);
                const bool in = r < R;
                g[i] = in ? *(const uint4 *)(gu + r * 2 * F + j) : make_uint4(0, 0, 0, 0);
                u[i] = in ? *(const uint4 *)(gu + r * 2 * F + F + j) : make_uint4(0, 0, 0, 0);
                d[i] = in ? *(const uint4 *)(dy + r * F + j) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int row = tr + 32 * (p0 + i);
                const int64_t r = r0 + row;
                float fg[8], fu[8], fd[8], dg[8], du[8];
                q_vec<__nv_bfloat16>::get(g[i], fg);
                q_vec<__nv_bfloat16>::get(u[i], fu);
                q_vec<__nv_bfloat16>::get(d[i], fd);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    fr_glu::bwd1<ACT>(fg[k], fu[k], fd[k], dg[k], du[k]);
                    if (dx_bf16) {
                        dg[k] = __bfloat162float(__float2bfloat16_rn(dg[k]));
                        du[k] = __bfloat162float(__float2bfloat16_rn(du[k]));
                    }
                    m = max(m, max(abs_bits(dg[k]), abs_bits(du[k])));
                }
                const uint2 qg = make_uint2(quantize4(dg, s, e5m2), quantize4(dg + 4, s, e5m2));
                const uint2 qu = make_uint2(quantize4(du, s, e5m2), quantize4(du + 4, s, e5m2));
                const int w = 2 * tj, sw = ct_swz(row);
                *(uint2 *)&tile[row][w ^ sw] = qg;
                *(uint2 *)&tile[row][(16 + w) ^ sw] = qu;
                if (r < R) {
                    *(uint2 *)(codes + r * 2 * F + j) = qg;
                    *(uint2 *)(codes + r * 2 * F + F + j) = qu;
                }
            }
        }
        if (codes_t) {
            __syncthreads();
            store_transposed(tile, r0, j - tj * 8, R, 2 * F, codes_t, GQ_J, F - GQ_J);
            __syncthreads();
        }
    }
    if (amax) block_atomic_max(amax, m, red);
}

/* any shape: one element of d_gate_up [R][2F] per thread and step */
template <int ACT, typename TG, typename TD>
__global__ void gq_one(const TG *gu, const TD *dy, int64_t R, int64_t F, int dx_bf16, const float *scale_ptr, int e5m2,
                       uint8_t *codes, uint8_t *codes_t, unsigned *amax)
{
    __shared__ unsigned red[32];
    const float s = *scale_ptr;
    const int64_t C = 2 * F;
    unsigned m = 0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < R * C; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / C, c = e - r * C, j = c < F ? c : c - F;
        float dg, du;
        fr_glu::bwd1<ACT>(ld_f(gu, r * C + j), ld_f(gu, r * C + F + j), ld_f(dy, r * F + j), dg, du);
        float v = c < F ? dg : du;
        if (dx_bf16) v = __bfloat162float(__float2bfloat16_rn(v));
        m = max(m, abs_bits(v));
        const uint8_t q = quantize(v, s, e5m2);
        codes[e] = q;
        if (codes_t) codes_t[c * R + r] = q;
    }
    if (amax) block_atomic_max(amax, m, red);
}

/* scale_inv as the data gradient makes it (NaN for a scale that is not finite and > 0), the
 * amax's NaN bits canonicalized */
__global__ void gq_finish(const float *scale_ptr, float *sinv, unsigned *amax)
{
    if (sinv) {
        const float sc = *scale_ptr;
        *sinv = sinv_of(sc, !(sc > 0.0f) || isinf(sc));
    }
    if (amax && *amax > INF_BITS) *amax = NAN_BITS;
}

struct gq_args {
    const void *gu, *dy;
    int64_t R, F;
    int dx_bf16, e5m2;
    const float *scale;
    uint8_t *codes, *codes_t;
    unsigned *amax;
};

template <int ACT, typename TG, typename TD> void gq_launch(cudaStream_t st, const gq_args &a)
{
    const TG *gu = (const TG *)a.gu;
    const TD *dy = (const TD *)a.dy;
    const int64_t C = 2 * a.F;
    if constexpr (sizeof(TG) == 2 && sizeof(TD) == 2) {
        if (a.R % 16 == 0 && a.F % GQ_J == 0 && aligned16(gu) && aligned16(dy) && aligned16(a.codes) &&
            aligned16(a.codes_t)) {
            const int64_t ntiles = (a.R + CT_TILE - 1) / CT_TILE * (a.F / GQ_J);
            gq_tiles<ACT><<<wave_blocks(ntiles, 1), 256, 0, st>>>(gu, dy, a.R, a.F, a.dx_bf16, a.scale, a.e5m2,
                                                                  a.codes, a.codes_t, a.amax);
            return;
        }
    }
    const unsigned nb = resident_blocks(gq_one<ACT, TG, TD>, a.R * C);
    gq_one<ACT, TG, TD><<<nb, 256, 0, st>>>(gu, dy, a.R, a.F, a.dx_bf16, a.scale, a.e5m2, a.codes, a.codes_t, a.amax);
}

template <typename TG, typename TD> void gq_act(cudaStream_t st, int act, const gq_args &a)
{
    if (act == FR_GLU_GELU_TANH)
        gq_launch<FR_GLU_GELU_TANH, TG, TD>(st, a);
    else if (act == FR_GLU_GELU)
        gq_launch<FR_GLU_GELU, TG, TD>(st, a);
    else
        gq_launch<FR_GLU_SILU, TG, TD>(st, a);
}

fr_status swiglu_grad_quant_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 3 || !k->in[0] || !k->in[1] || !k->in[2] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs (gate_up, dy, scale) and the output codes");
    const fr_tensor *x = k->in[0], *dy = k->in[1], *sc = k->in[2];
    fr_tensor *codes = k->out[0], *ct = k->n_out > 1 ? k->out[1] : NULL, *si = k->n_out > 2 ? k->out[2] : NULL;
    fr_tensor *am = k->n_out > 3 ? k->out[3] : NULL;
    int dx_bf16, act;
    const char *a, *cd;
    FR_TRY(fr_attr_bf16(n, "dx_dtype", &dx_bf16));
    FR_TRY(fr_node_attr_string(n, "activation", "silu", &a));
    FR_TRY(fr_node_attr_string(n, "codes_dtype", "float8e5m2", &cd));
    if (fr_glu_act_parse(a, &act) != FR_OK) return fr_node_error(n, FR_ERR_UNSUPPORTED, "activation \"%s\"", a);
    const fr_dtype fmt = strcmp(cd, "float8e4m3fn") == 0 ? FR_F8E4M3 : FR_F8E5M2;
    const int64_t C = x->rank ? x->dims[x->rank - 1] : 0, F = C / 2, R = C ? fr_tensor_numel(x) / C : 0;
    if ((x->dtype != FR_F32 && x->dtype != FR_BF16) || (dy->dtype != FR_F32 && dy->dtype != FR_BF16) || C % 2 != 0 ||
        fr_tensor_numel(dy) != R * F || sc->dtype != FR_F32 || fr_tensor_numel(sc) != 1 || codes->dtype != fmt ||
        fr_tensor_numel(codes) != R * C || (ct && (ct->dtype != fmt || fr_tensor_numel(ct) != R * C)) ||
        (si && (si->dtype != FR_F32 || fr_tensor_numel(si) != 1)) ||
        (am && (am->dtype != FR_F32 || fr_tensor_numel(am) != 1)))
        return fr_node_error(n, FR_ERR_SHAPE,
                             "inputs or outputs do not have the inferred dtypes and shapes (re-run "
                             "shape inference)");
    cudaStream_t st = k->cu->stream;
    unsigned *ab = am ? (unsigned *)am->data : NULL;
    if (ab) FR_CUDA_TRY(cudaMemsetAsync(ab, 0, sizeof(float), st));
    if (R * C > 0) {
        const gq_args g = {x->data, dy->data, R, F, dx_bf16, fmt == FR_F8E5M2, (const float *)sc->data,
                           (uint8_t *)codes->data, ct ? (uint8_t *)ct->data : NULL, ab};
        const int gb = x->dtype == FR_BF16, db = dy->dtype == FR_BF16;
        if (gb && db)
            gq_act<__nv_bfloat16, __nv_bfloat16>(st, act, g);
        else if (gb)
            gq_act<__nv_bfloat16, float>(st, act, g);
        else if (db)
            gq_act<float, __nv_bfloat16>(st, act, g);
        else
            gq_act<float, float>(st, act, g);
        FR_TRY(fr_cuda_check_launch(n, "swiglu_grad_quantize"));
    }
    if (!si && !ab) return FR_OK;
    gq_finish<<<1, 1, 0, st>>>((const float *)sc->data, si ? (float *)si->data : NULL, ab);
    return fr_cuda_check_launch(n, "swiglu_grad_quantize scale_inv");
}

fr_status swiglu_quant_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1] || k->n_out < 2 || !k->out[0] || !k->out[1])
        return fr_node_error(n, FR_ERR_GRAPH, "needs (gate_up, scale) and the outputs codes and amax");
    const fr_tensor *x = k->in[0], *sc = k->in[1];
    fr_tensor *codes = k->out[0], *amax = k->out[1];
    int y_bf16, act;
    const char *a;
    FR_TRY(fr_attr_bf16(n, "y_dtype", &y_bf16));
    FR_TRY(fr_node_attr_string(n, "activation", "silu", &a));
    if (fr_glu_act_parse(a, &act) != FR_OK) return fr_node_error(n, FR_ERR_UNSUPPORTED, "activation \"%s\"", a);
    if ((x->dtype != FR_F32 && x->dtype != FR_BF16) || x->rank < 1 || x->dims[x->rank - 1] % 2 != 0 ||
        sc->dtype != FR_F32 || fr_tensor_numel(sc) != 1 || codes->dtype != FR_F8E4M3 ||
        fr_tensor_numel(codes) * 2 != fr_tensor_numel(x) || amax->dtype != FR_F32 || fr_tensor_numel(amax) != 1)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "inputs or outputs do not have the inferred dtypes and shapes (re-run "
                             "shape inference)");
    const int64_t F = x->dims[x->rank - 1] / 2, rows = F ? fr_tensor_numel(x) / (2 * F) : 0;
    cudaStream_t st = k->cu->stream;
    FR_CUDA_TRY(cudaMemsetAsync(amax->data, 0, sizeof(float), st));
    if (rows * F == 0) return FR_OK;
    unsigned *ab = (unsigned *)amax->data;
    if (x->dtype == FR_BF16)
        launch_act(st, act, (const __nv_bfloat16 *)x->data, rows, F, (const float *)sc->data, y_bf16,
                   (uint8_t *)codes->data, ab);
    else
        launch_act(st, act, (const float *)x->data, rows, F, (const float *)sc->data, y_bf16, (uint8_t *)codes->data,
                   ab);
    FR_TRY(fr_cuda_check_launch(n, "swiglu_quantize"));
    canonical_amax<<<1, 1, 0, st>>>(ab);
    return fr_cuda_check_launch(n, "swiglu_quantize amax");
}

} // namespace

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_swiglu_quant[] = {
    {"SwiGLUQuantize", FR_DOMAIN_FP8RUN, swiglu_quant_cuda, NULL},
    {"SwiGLUGradQuantize", FR_DOMAIN_FP8RUN, swiglu_grad_quant_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
