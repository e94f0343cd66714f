/* Launchers of the training-step kernels (runtime/cuda/cuda_train_kernels.cu); see there. */
#ifndef FR_CUDA_TRAIN_KERNELS_H
#define FR_CUDA_TRAIN_KERNELS_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FR_MT_CHUNK 65536 /* elements per block of the multi-tensor kernels */

/* One parameter (device pointers). */
typedef struct fr_mt_entry {
    float *p;          /* FP32 master weights */
    const float *g;    /* this micro-batch's gradient (an executor output) */
    float *acc;        /* accumulated gradient (micro-batches > 1), else NULL */
    float *s0, *s1;    /* optimizer state: AdamW exp_avg, exp_avg_sq; SGD momentum_buffer
                          (AdamW bf16/fp8 state: uint16 / uint8 storage, runtime/train/optim_lowp.h) */
    long long n;
    int decay;
    float *sc0, *sc1;  /* fp8 state: block scales of s0 / s1, else NULL */
} fr_mt_entry;

typedef struct fr_mt_chunk {
    int entry;
    long long start, len;
} fr_mt_chunk;

/* What k_check decides, in device memory; copied into a slot of the host's statistics ring
 * at the end of the step (runtime/cuda/cuda_train.c). */
typedef struct fr_step_scalars {
    double norm;       /* global gradient norm before clipping */
    long long tstep;   /* the optimizer step this update is (1-based), counted on the device:
                          steps skipped on the device do not count */
    float loss_sum;    /* sum of the micro-batches' losses */
    float coef;        /* clipping coefficient (float), used when clip */
    int ok;            /* finite loss, gradients and amaxes, no device error: update */
    int clip;          /* coef < 1 */
    int numeric_error; /* a kernel reported FR_ERR_NUMERIC (current/block scaling met NaN/Inf) */
    int err[4];        /* the device error word as the step left it (cuda_kernel.h) */
} fr_step_scalars;

/* Optimizer steps a queued step's update may be, counted from `base` (the count the host knew
 * when it queued the step): at most this many steps are queued and not yet read back, so the
 * device's count lies in [base, base + FR_OPT_WINDOW). */
#define FR_OPT_WINDOW 64

typedef struct fr_adamw_args {
    float keep, b1, one_b1, b2, one_b2, eps;
    int decay_on;
    long long base;
    /* for the update that is step base + 1 + i: -(lr / (1 - beta1^t)) and sqrt(1 - beta2^t),
       computed by the host in double exactly as runtime/train/optimizer.c does */
    float neg_step[FR_OPT_WINDOW], bc2_sqrt[FR_OPT_WINDOW];
} fr_adamw_args;

typedef struct fr_sgd_args {
    float wd, mom, one_damp, neg_lr;
    int decay_on, momentum_on, nesterov; /* the first update (tstep 1) starts the momentum */
} fr_sgd_args;

/* Delayed-scaling state of n operands (device pointers). */
typedef struct fr_scaling_dev {
    float *history;    /* n x history_len */
    int *pos;
    long long *updates;
    float *scale;
    float **scale_out; /* per operand: the graph's [1] scale value on the device */
    float *fp8_max;    /* per operand */
    int history_len, interval, algo, margin;
} fr_scaling_dev;

cudaError_t fr_cuda_mt_accumulate(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int first,
                                  cudaStream_t s);
cudaError_t fr_cuda_mt_divide(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, float k, cudaStream_t s);
/* use_acc, here and in the norm and optimizer launches below: 0 reads each entry's g; 1 its acc
 * as it is (divided by fr_cuda_mt_divide); k > 1 its acc, the sum of k micro-batches, divided by
 * k on the fly (the same bits as fr_cuda_mt_divide, without its pass). */
cudaError_t fr_cuda_mt_check(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                             double *partial, const float *loss_sum, int k, const int *dev_error, const int *amax_bad,
                             double max_norm, long long *opt_steps, fr_step_scalars *out, cudaStream_t s);
/* fr_cuda_mt_check in two halves, for a norm whose per-chunk sums are reduced across ranks in
 * between (sharded gradients: each rank sums its own chunks, zero-length elsewhere). */
cudaError_t fr_cuda_mt_sumsq(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc, double *partial,
                             cudaStream_t s);
cudaError_t fr_cuda_mt_check_partials(const double *partial, int n_chunks, const float *loss_sum, int k,
                                      const int *dev_error, const int *amax_bad, double max_norm, long long *opt_steps,
                                      fr_step_scalars *out, cudaStream_t s);
cudaError_t fr_cuda_mt_adamw(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                             const fr_step_scalars *sc, fr_adamw_args a, cudaStream_t s);
/* AdamW with bf16/fp8 state and/or bf16 master weights (runtime/cuda/cuda_optim_lowp.cu):
 * runtime/train/optim_lowp.c's arithmetic; state_dtype is an fr_opt_state_dtype. */
cudaError_t fr_cuda_mt_adamw_lowp(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                                  const fr_step_scalars *sc, fr_adamw_args a, int state_dtype, int master_bf16,
                                  unsigned long long seed, cudaStream_t s);
cudaError_t fr_cuda_mt_sgd(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e, int use_acc,
                           const fr_step_scalars *sc, fr_sgd_args a, cudaStream_t s);
cudaError_t fr_cuda_micro_scalars(const float *loss, float *loss_sum, int first, const float *const *amax, int n_amax,
                                  float *step_amax, int *amax_bad, cudaStream_t s);
cudaError_t fr_cuda_scaling_update(fr_scaling_dev st, int n, const float *step_amax, const fr_step_scalars *sc,
                                   cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
