/* Device kernels of a training step (runtime/cuda/cuda_train.c drives them): gradient
 * accumulation, the global gradient norm, the finite check and clipping coefficient, the
 * AdamW/SGD updates over all parameters in one launch each, and the delayed-scaling update.
 *
 * Every parameter is split into chunks of FR_MT_CHUNK elements; one block takes one chunk, so
 * a single launch covers all parameters ("multi-tensor"). The arithmetic of the optimizers is
 * runtime/train/optimizer.c's, operation for operation, with rounding intrinsics (__fmul_rn, ...)
 * so that nvcc cannot contract or reorder anything: on the same gradients the GPU update
 * equals the CPU one bit for bit. */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "runtime/cuda/cuda_train_kernels.h"

#define THREADS 256

/* ---- gradients ---- */

/* acc = g (first) or acc + g, element by element: float4 loads where both start 16-byte aligned
 * (the scalar loop kept about 8 KB in flight a multiprocessor, half the bandwidth), the same sums */
__global__ void k_accumulate(const fr_mt_chunk *chunks, const fr_mt_entry *e, int first)
{
    const fr_mt_chunk c = chunks[blockIdx.x];
    const float *g = e[c.entry].g + c.start;
    float *acc = e[c.entry].acc + c.start;
    long long i0 = 0;
    if ((((uintptr_t)g | (uintptr_t)acc) & 15) == 0) {
        const long long n4 = c.len / 4;
        const float4 *g4 = (const float4 *)g;
        float4 *a4 = (float4 *)acc;
#pragma unroll 4
        for (long long i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = g4[i];
            if (first) {
                a4[i] = v;
            } else {
                const float4 a = a4[i];
                a4[i] = make_float4(__fadd_rn(a.x, v.x), __fadd_rn(a.y, v.y), __fadd_rn(a.z, v.z), __fadd_rn(a.w, v.w));
            }
        }
        i0 = n4 * 4;
    }
    for (long long i = i0 + threadIdx.x; i < c.len; i += blockDim.x) acc[i] = first ? g[i] : __fadd_rn(acc[i], g[i]);
}

__global__ void k_divide(const fr_mt_chunk *chunks, const fr_mt_entry *e, float k)
{
    const fr_mt_chunk c = chunks[blockIdx.x];
    float *g = e[c.entry].acc;
    for (long long i = c.start + threadIdx.x; i < c.start + c.len; i += blockDim.x) g[i] = __fdiv_rn(g[i], k);
}

/* The gradient the norm and the optimizers read: use_acc 0 the run's g; 1 the accumulation
 * buffer as it is (divided already: data parallel); k > 1 the sum of k micro-batches, divided
 * here as k_divide would (__fdiv_rn: the same bits) rather than in a pass of its own over every
 * gradient (at 8B, 64 GB of traffic a step). */
__device__ __forceinline__ float grad_of(float g, int use_acc)
{
    return use_acc > 1 ? __fdiv_rn(g, (float)use_acc) : g;
}

/* Whether the chunk's part of each of these arrays starts 16-byte aligned (float4 loads). */
__device__ __forceinline__ bool aligned16(long long start, const float *a, const float *b = nullptr,
                                          const float *c = nullptr, const float *d = nullptr)
{
    const uintptr_t u = (uintptr_t)(a + start) | (b ? (uintptr_t)(b + start) : 0) | (c ? (uintptr_t)(c + start) : 0) |
                        (d ? (uintptr_t)(d + start) : 0);
    return (u & 15) == 0;
}

/* sum of squares per chunk, in double; reduced in chunk order by k_check (deterministic). Four
 * elements a thread a load where the gradient is aligned (the one-float loop kept too few bytes
 * in flight to reach the bandwidth), each thread summing its elements in index order. */
__global__ void k_sumsq(const fr_mt_chunk *chunks, const fr_mt_entry *e, int use_acc, double *partial)
{
    __shared__ double s[THREADS];
    const fr_mt_chunk c = chunks[blockIdx.x];
    const float *g = use_acc ? e[c.entry].acc : e[c.entry].g;
    double a = 0;
    long long i0 = c.start;
    if (aligned16(c.start, g)) {
        const long long n4 = c.len / 4;
        const float4 *g4 = (const float4 *)(g + c.start);
#pragma unroll 4
        for (long long i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 r = g4[i];
            const float4 v = make_float4(grad_of(r.x, use_acc), grad_of(r.y, use_acc), grad_of(r.z, use_acc),
                                         grad_of(r.w, use_acc));
            a += (double)v.x * (double)v.x;
            a += (double)v.y * (double)v.y;
            a += (double)v.z * (double)v.z;
            a += (double)v.w * (double)v.w;
        }
        i0 = c.start + n4 * 4;
    }
    for (long long i = i0 + threadIdx.x; i < c.start + c.len; i += blockDim.x) {
        const float v = grad_of(g[i], use_acc);
        a += (double)v * (double)v;
    }
    s[threadIdx.x] = a;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

/* One thread: the norm, whether the step is usable, and the clipping coefficient; counts the
 * optimizer step when it is usable (the host learns of it only when it reads the statistics). */
__global__ void k_check(const double *partial, int n_chunks, const float *loss_sum_in, int k, const int *dev_error,
                        const int *amax_bad, double max_norm, long long *opt_steps, fr_step_scalars *out)
{
    double ss = 0;
    for (int i = 0; i < n_chunks; i++) ss += partial[i];
    double norm = sqrt(ss);
    float loss = loss_sum_in[0];
    int ok = isfinite(norm) && isfinite(loss) && *amax_bad == 0 && dev_error[0] == 0;
    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    out->norm = norm;
    out->loss_sum = loss;
    out->ok = ok;
    out->clip = max_norm > 0 && coef < 1.0;
    out->coef = (float)coef;
    out->numeric_error = dev_error[0] == 9 /* FR_ERR_NUMERIC */;
    out->tstep = *opt_steps + 1;
    if (ok) *opt_steps = out->tstep;
}

/* ---- optimizers (runtime/train/optimizer.c, same operations in the same order) ---- */

__device__ inline float clipped(float g, const fr_step_scalars *s) { return s->clip ? __fmul_rn(g, s->coef) : g; }

/* One element of AdamW in registers: p, m, v updated from the raw gradient graw. */
__device__ __forceinline__ void adamw_elem(float &p, float &m, float &v, float graw, bool decay, int use_acc,
                                           const fr_step_scalars *s, const fr_adamw_args &a, float neg_step,
                                           float bc2_sqrt)
{
    if (decay) p = __fmul_rn(p, a.keep);
    const float gk = clipped(grad_of(graw, use_acc), s);
    m = __fmaf_rn(gk, a.one_b1, __fmul_rn(m, a.b1));
    v = __fmaf_rn(__fmul_rn(gk, a.one_b2), gk, __fmul_rn(v, a.b2));
    const float d = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), a.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(neg_step, m), d));
}

/* float4 loads and stores of p, g, m, v where all four are aligned (the update reads 16 and
 * writes 12 bytes an element, the largest pass of the step after the GEMMs: one float a load
 * left it short of the bandwidth), the one-float loop for the rest; the same operations on
 * every element either way. */
__global__ void k_adamw(const fr_mt_chunk *chunks, const fr_mt_entry *e, int use_acc, const fr_step_scalars *s,
                        fr_adamw_args a)
{
    if (!s->ok) return;
    const fr_mt_chunk c = chunks[blockIdx.x];
    const fr_mt_entry en = e[c.entry];
    const float *g = use_acc ? en.acc : en.g;
    const long long w = s->tstep - a.base - 1; /* in [0, FR_OPT_WINDOW) by the queue's bound */
    const float neg_step = a.neg_step[w], bc2_sqrt = a.bc2_sqrt[w];
    const bool decay = en.decay && a.decay_on;
    long long i0 = c.start;
    if (aligned16(c.start, en.p, g, en.s0, en.s1)) {
        const long long n4 = c.len / 4;
        float4 *p4 = (float4 *)(en.p + c.start), *m4 = (float4 *)(en.s0 + c.start), *v4 = (float4 *)(en.s1 + c.start);
        const float4 *g4 = (const float4 *)(g + c.start);
#pragma unroll 2
        for (long long i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 p = p4[i], m = m4[i], v = v4[i];
            const float4 gr = g4[i];
            adamw_elem(p.x, m.x, v.x, gr.x, decay, use_acc, s, a, neg_step, bc2_sqrt);
            adamw_elem(p.y, m.y, v.y, gr.y, decay, use_acc, s, a, neg_step, bc2_sqrt);
            adamw_elem(p.z, m.z, v.z, gr.z, decay, use_acc, s, a, neg_step, bc2_sqrt);
            adamw_elem(p.w, m.w, v.w, gr.w, decay, use_acc, s, a, neg_step, bc2_sqrt);
            p4[i] = p, m4[i] = m, v4[i] = v;
        }
        i0 = c.start + n4 * 4;
    }
    for (long long i = i0 + threadIdx.x; i < c.start + c.len; i += blockDim.x) {
        float p = en.p[i], m = en.s0[i], v = en.s1[i];
        adamw_elem(p, m, v, g[i], decay, use_acc, s, a, neg_step, bc2_sqrt);
        en.s0[i] = m, en.s1[i] = v, en.p[i] = p;
    }
}

__global__ void k_sgd(const fr_mt_chunk *chunks, const fr_mt_entry *e, int use_acc, const fr_step_scalars *s,
                      fr_sgd_args a)
{
    if (!s->ok) return;
    const fr_mt_chunk c = chunks[blockIdx.x];
    const fr_mt_entry en = e[c.entry];
    const float *g = use_acc ? en.acc : en.g;
    for (long long i = c.start + threadIdx.x; i < c.start + c.len; i += blockDim.x) {
        const float gk = clipped(grad_of(g[i], use_acc), s);
        float d = en.decay && a.decay_on ? __fmaf_rn(en.p[i], a.wd, gk) : gk;
        if (a.momentum_on) {
            float b = s->tstep == 1 ? d : __fmaf_rn(d, a.one_damp, __fmul_rn(en.s0[i], a.mom));
            en.s0[i] = b;
            d = a.nesterov ? __fmaf_rn(b, a.mom, d) : b;
        }
        en.p[i] = __fmaf_rn(d, a.neg_lr, en.p[i]);
    }
}

/* ---- loss and FP8 amaxes across micro-batches ---- */

__global__ void k_micro_scalars(const float *loss, float *loss_sum, int first, const float *const *amax, int n_amax,
                                float *step_amax, int *amax_bad)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) loss_sum[0] = first ? loss[0] : __fadd_rn(loss_sum[0], loss[0]);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_amax; i += gridDim.x * blockDim.x) {
        if (!amax[i]) { /* no amax computed for this state: -1 marks it for k_scaling_update */
            step_amax[i] = -1.0f;
            continue;
        }
        float a = *amax[i];
        if (!isfinite(a)) *amax_bad = 1;
        else if (first || a > step_amax[i]) step_amax[i] = first ? (a > 0.0f ? a : 0.0f) : a;
    }
}

/* ---- delayed scaling (graph/fp8_scaling.c: fr_fp8_scaling_update) ---- */

__global__ void k_scaling_update(fr_scaling_dev st, int n, const float *step_amax, const fr_step_scalars *s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !s->ok || step_amax[i] < 0.0f) return; /* < 0: no amax this step (kept as on the CPU) */
    const int H = st.history_len;
    float *hist = st.history + (size_t)i * H;
    long long k = st.updates[i];
    hist[st.pos[i]] = step_amax[i];
    st.pos[i] = (st.pos[i] + 1) % H;
    st.updates[i] = k + 1;
    if (k % st.interval != 0) return;
    float a;
    if (st.algo == 1) { /* most recent */
        a = hist[(st.pos[i] + H - 1) % H];
    } else {
        a = 0.0f;
        for (int j = 0; j < H; j++) a = hist[j] > a ? hist[j] : a;
    }
    if (a == 0.0f) return; /* keeps the old scale */
    float sc = ldexpf(__fdiv_rn(st.fp8_max[i], a), -st.margin);
    if (!(sc <= FLT_MAX)) sc = FLT_MAX;
    if (sc < FLT_MIN) sc = FLT_MIN;
    st.scale[i] = sc;
    *st.scale_out[i] = sc; /* the graph's scale value the next step quantizes with */
}

/* ---- launchers ---- */

extern "C" {

static cudaError_t launched(void) { return cudaGetLastError(); }

cudaError_t fr_cuda_mt_accumulate(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int first,
                                  cudaStream_t s)
{
    if (n_chunks) k_accumulate<<<n_chunks, THREADS, 0, s>>>(chunks, e, first);
    return launched();
}

cudaError_t fr_cuda_mt_divide(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, float k, cudaStream_t s)
{
    if (n_chunks) k_divide<<<n_chunks, THREADS, 0, s>>>(chunks, e, k);
    return launched();
}

cudaError_t fr_cuda_mt_check(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                             double *partial, const float *loss_sum, int k, const int *dev_error, const int *amax_bad,
                             double max_norm, long long *opt_steps, fr_step_scalars *out, cudaStream_t s)
{
    if (n_chunks) k_sumsq<<<n_chunks, THREADS, 0, s>>>(chunks, e, use_acc, partial);
    cudaError_t err = launched();
    if (err != cudaSuccess) return err;
    k_check<<<1, 1, 0, s>>>(partial, n_chunks, loss_sum, k, dev_error, amax_bad, max_norm, opt_steps, out);
    return launched();
}

cudaError_t fr_cuda_mt_sumsq(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc, double *partial,
                             cudaStream_t s)
{
    if (n_chunks) k_sumsq<<<n_chunks, THREADS, 0, s>>>(chunks, e, use_acc, partial);
    return launched();
}

cudaError_t fr_cuda_mt_check_partials(const double *partial, int n_chunks, const float *loss_sum, int k,
                                      const int *dev_error, const int *amax_bad, double max_norm, long long *opt_steps,
                                      fr_step_scalars *out, cudaStream_t s)
{
    k_check<<<1, 1, 0, s>>>(partial, n_chunks, loss_sum, k, dev_error, amax_bad, max_norm, opt_steps, out);
    return launched();
}

cudaError_t fr_cuda_mt_adamw(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                             const fr_step_scalars *sc, fr_adamw_args a, cudaStream_t s)
{
    if (n_chunks) k_adamw<<<n_chunks, THREADS, 0, s>>>(chunks, e, use_acc, sc, a);
    return launched();
}

cudaError_t fr_cuda_mt_sgd(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                           const fr_step_scalars *sc, fr_sgd_args a, cudaStream_t s)
{
    if (n_chunks) k_sgd<<<n_chunks, THREADS, 0, s>>>(chunks, e, use_acc, sc, a);
    return launched();
}

cudaError_t fr_cuda_micro_scalars(const float *loss, float *loss_sum, int first, const float *const *amax, int n_amax,
                                  float *step_amax, int *amax_bad, cudaStream_t s)
{
    int blocks = n_amax > THREADS ? (n_amax + THREADS - 1) / THREADS : 1;
    k_micro_scalars<<<blocks, THREADS, 0, s>>>(loss, loss_sum, first, amax, n_amax, step_amax, amax_bad);
    return launched();
}

cudaError_t fr_cuda_scaling_update(fr_scaling_dev st, int n, const float *step_amax, const fr_step_scalars *sc,
                                   cudaStream_t s)
{
    if (n) k_scaling_update<<<(n + 127) / 128, 128, 0, s>>>(st, n, step_amax, sc);
    return launched();
}

} /* extern "C" */
