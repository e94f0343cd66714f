/* Optimizers on FP32 master weights (host memory; the CPU reference for the CUDA version):
 * AdamW and SGD with momentum, with PyTorch's semantics, plus global-norm gradient clipping
 * and gradient-accumulation helpers.
 *
 * Arithmetic. Hyper-parameters are doubles (Python floats in PyTorch); the scalar factors
 * below are computed in double and rounded once to float ("(f)x" below); every per-element
 * operation is float32, in exactly this order, with fmaf() where PyTorch's CPU kernels use
 * a fused multiply-add (its `add_(x, alpha=a)` and `addcmul_` are FMAs in the AVX2 kernels,
 * and nvcc contracts them the same way). With that, the results equal torch 1.13's
 * single-tensor (foreach=False) CPU path bit for bit (tests/test_optimizer.c checks this
 * against tools/ref_optimizer.py's fixtures). No expression outside the fmaf() calls has the
 * a*b+c shape a compiler could contract, so the results do not depend on -ffp-contract.
 *
 * AdamW (torch.optim.AdamW, amsgrad=False, maximize=False), step t = 1, 2, ...:
 *     if decay:  p = p * (f)(1 - lr*wd)                       (decoupled, applied first)
 *     m = fmaf(g, (f)(1 - b1), m * (f)b1)
 *     v = fmaf(g * (f)(1 - b2), g, v * (f)b2)
 *     bc1 = 1 - b1^t,  bc2 = 1 - b2^t                          (double, pow())
 *     d = sqrtf(v) / (f)sqrt(bc2) + (f)eps
 *     p = p + ((f)(-lr / bc1) * m) / d
 * (torch >= 2.0 writes the m update as m.lerp_(g, 1 - b1), which can differ from the form
 *  above in the last bit of m; the math is the same.)
 *
 * SGD (torch.optim.SGD, maximize=False), step t = 1, 2, ...:
 *     d = decay ? fmaf(p, (f)wd, g) : g                        (L2: decay added to the gradient)
 *     if momentum != 0:
 *         buf = (t == 1) ? d : fmaf(d, (f)(1 - dampening), buf * (f)momentum)
 *         d = nesterov ? fmaf(buf, (f)momentum, d) : buf
 *     p = fmaf(d, (f)(-lr), p)
 * The gradient buffers are never modified by a step.
 *
 * Weight decay per parameter: FR_DECAY_AUTO (default) decays parameters of rank >= 2 only
 * (matrices, embeddings), not biases and norm gains, unless the config's decay_1d is set;
 * FR_DECAY_ON / FR_DECAY_OFF force it.
 *
 * State (FP32, allocated once, zero at creation) is exposed per (parameter, slot) so a
 * checkpoint can save it by parameter name and slot name. Slot names are PyTorch's
 * state_dict keys: AdamW "exp_avg", "exp_avg_sq"; SGD with momentum "momentum_buffer". */
#ifndef FR_OPTIMIZER_H
#define FR_OPTIMIZER_H

#include <stdint.h>

#include "graph/tensor.h"
#include "runtime/train/optim_lowp.h"
#include "graph/status.h"

typedef enum fr_opt_kind { FR_OPT_ADAMW = 1, FR_OPT_SGD = 2 } fr_opt_kind;

typedef struct fr_opt_config {
    fr_opt_kind kind;
    double weight_decay; /* AdamW: decoupled; SGD: L2 added to the gradient */
    double beta1, beta2, eps; /* AdamW */
    double momentum, dampening; /* SGD */
    int nesterov;        /* SGD: needs momentum > 0 and dampening == 0 (as torch) */
    int decay_1d;        /* 1: FR_DECAY_AUTO also decays rank-0/1 parameters */
    /* AdamW only (runtime/train/optim_lowp.h): the moments' storage dtype, and bf16 master weights
     * by stochastic rounding keyed by sr_seed. Zero (memset) is fp32 / off. */
    fr_opt_state_dtype state_dtype;
    int master_bf16;
    uint64_t sr_seed;
} fr_opt_config;

/* PyTorch's defaults: AdamW betas (0.9, 0.999), eps 1e-8, weight_decay 0.01;
 * SGD momentum 0, dampening 0, weight_decay 0, no nesterov. decay_1d = 0. */
fr_opt_config fr_opt_config_adamw(void);
fr_opt_config fr_opt_config_sgd(void);

typedef enum fr_opt_decay { FR_DECAY_AUTO = 0, FR_DECAY_ON = 1, FR_DECAY_OFF = 2 } fr_opt_decay;

/* One parameter as the caller describes it. The optimizer copies name and dims; data and grad
 * are borrowed (they must stay valid, or be re-bound with fr_optimizer_bind). */
typedef struct fr_opt_param {
    const char *name;
    float *data;  /* FP32 master weights, updated in place */
    float *grad;  /* gradient, same element count */
    int rank;     /* 0..FR_MAX_RANK; the product of dims must equal the element count */
    int64_t dims[FR_MAX_RANK];
    fr_opt_decay decay;
} fr_opt_param;

typedef struct fr_optimizer fr_optimizer;

/* Validate the config like torch does (lr is per step; 0 <= beta < 1, eps >= 0, wd >= 0,
 * momentum >= 0, nesterov rules), the parameters (unique non-empty names, non-NULL buffers
 * for non-empty tensors, rank and dims), and allocate the zeroed state. */
FR_NODISCARD fr_status fr_optimizer_create(const fr_opt_config *cfg, const fr_opt_param *params, int n_params,
                              fr_optimizer **out);
void fr_optimizer_free(fr_optimizer *o);

/* One update of every parameter with learning rate lr (finite, >= 0). Increments the step
 * count first (t = previous + 1), as torch does. */
FR_NODISCARD fr_status fr_optimizer_step(fr_optimizer *o, double lr);

/* ---- gradients ---- */
/* sqrt(sum of g^2 over every gradient element), accumulated in double in parameter order. */
double fr_optimizer_grad_norm(const fr_optimizer *o);
/* torch.nn.utils.clip_grad_norm_(max_norm) over all gradients: computes the norm as
 * fr_optimizer_grad_norm; with coef = max_norm / (norm + 1e-6) (double), when coef < 1 every
 * gradient element is multiplied by (float)coef, otherwise nothing changes (torch multiplies by
 * the clamped coef, 1.0, which changes nothing). *norm_out (may be NULL) gets the norm before
 * clipping. A non-finite norm (some gradient is Inf/NaN) is FR_ERR_NUMERIC naming the first
 * such parameter and element; *norm_out still gets the norm and no gradient is touched, so the
 * caller can skip the step. max_norm must be finite and > 0. */
FR_NODISCARD fr_status fr_optimizer_clip_grad_norm(fr_optimizer *o, double max_norm, double *norm_out);
/* Set every gradient element to +0. */
void fr_optimizer_zero_grads(fr_optimizer *o);
/* Multiply every gradient element by (float)factor. */
void fr_optimizer_scale_grads(fr_optimizer *o, double factor);
/* Average over k accumulated micro-batches: every gradient element g = g / (float)k
 * (a correctly rounded division, exact for power-of-two k). k must be >= 1. */
FR_NODISCARD fr_status fr_optimizer_average_grads(fr_optimizer *o, int k);

/* ---- parameters and state (for checkpoints) ---- */
const fr_opt_config *fr_optimizer_config(const fr_optimizer *o);
int fr_optimizer_param_count(const fr_optimizer *o);
/* The optimizer's copy of parameter i (name and dims owned by the optimizer). */
const fr_opt_param *fr_optimizer_param(const fr_optimizer *o, int i);
int64_t fr_optimizer_param_numel(const fr_optimizer *o, int i);
/* Index of the parameter called name, or -1. */
int fr_optimizer_find_param(const fr_optimizer *o, const char *name);
/* Whether weight decay applies to parameter i (its decay flag resolved). */
int fr_optimizer_param_decays(const fr_optimizer *o, int i);
/* Point parameter i at new buffers (same element count). */
FR_NODISCARD fr_status fr_optimizer_bind(fr_optimizer *o, int i, float *data, float *grad);

/* State slots per parameter: AdamW 2, SGD with momentum 1, SGD without momentum 0. */
int fr_optimizer_state_count(const fr_optimizer *o);
/* PyTorch's state_dict key of a slot; NULL when out of range. */
const char *fr_optimizer_state_name(const fr_optimizer *o, int slot);
/* Slot index by name, or -1. */
int fr_optimizer_find_state(const fr_optimizer *o, const char *slot_name);
/* The slot's FP32 buffer of parameter i (fr_optimizer_param_numel(o, i) elements), writable
 * so a checkpoint can restore it; NULL when i or slot is out of range or the state is not FP32. */
float *fr_optimizer_state(fr_optimizer *o, int i, int slot);
/* The slot's storage in its own dtype (config.state_dtype; layout in optim_lowp.h): numel
 * float32, uint16 bf16 or uint8 E4M3 codes; *scales (may be NULL) gets the fp8 block scales
 * (ceil(numel / 128) floats), NULL for other dtypes. NULL when out of range. */
void *fr_optimizer_state_raw(fr_optimizer *o, int i, int slot, float **scales);
fr_opt_state_dtype fr_optimizer_state_dtype(const fr_optimizer *o);
/* Bytes of state the optimizer allocated; and what a parameter of numel elements takes under
 * config c (the same layout: each slot 4-byte aligned, fp8 scales included). */
size_t fr_optimizer_state_bytes(const fr_optimizer *o);
size_t fr_opt_state_bytes(const fr_opt_config *c, int64_t numel);
/* Steps taken so far (torch's state["step"]; 0 after create). Restore it with the state. */
int64_t fr_optimizer_step_count(const fr_optimizer *o);
FR_NODISCARD fr_status fr_optimizer_set_step_count(fr_optimizer *o, int64_t steps);

#endif
