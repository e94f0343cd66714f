/* CUDA kernel of SwiGLUQuantize (ops/swiglu.h): the one-input SwiGLU's y, computed with the
 * SwiGLU kernels' own math (glu_act.cuh) and rounded as they store it, quantized to E4M3 with
 * the delayed scale as the Linear's quantization does (quantize_util.cuh), and its amax: one
 * read of gate_up, the codes written, the bfloat16 y never. Vector path (F a multiple of the
 * 16-byte vector's V and 16-byte aligned rows): 16-byte loads of gate and up, 4 or 8 codes a
 * store; else one element per thread. The amax is reduced per block (at most one wave of blocks)
 * with one atomicMax on the output's bits, then NaN bits canonicalized as fr_amax returns them. */
#include "ops/cuda/glu_act.cuh"
#include "ops/cuda/quantize_util.cuh"

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
    {NULL, NULL, NULL, NULL},
};
