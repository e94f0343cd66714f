/* CUDA kernels of the elementwise family (see ops/cuda/cuda_kernel.h for the contract): the
 * table of the launchers in
 * elementwise_unary.cu (unary math, predicates, Cast, Clip, Identity, Dropout),
 * elementwise_binary.cu (arithmetic, comparisons, logic, Pow, Where, Expand) and
 * elementwise_grad.cu (ActivationGrad, PowGrad, FmodGrad, ExtremumGrad, ClipGrad),
 * whose host-side broadcast geometry and error flag are elementwise_geom.cu's.
 * Semantics are those of ops/unary.c, ops/binary.c and ops/elementwise_grad.c. */
#include "ops/cuda/elementwise_util.cuh"

/* ---- the table ---- */

#define EW_K(NAME, RUN, SCRATCH) {NAME, FR_DOMAIN_ONNX, RUN, SCRATCH}
#define EW_G(NAME, RUN, SCRATCH) {NAME, FR_DOMAIN_FP8RUN, RUN, SCRATCH}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_elementwise[] = {
    /* ops/unary.c: the rows of ops/ew_unary.def, then the rest */
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) {NAME, DOMAIN, ew_unary_run, NULL},
#include "ops/ew_unary.def"
    {"Gelu", FR_DOMAIN_FP8RUN, ew_unary_run, NULL}, /* ai.fp8run::Gelu: the same op below opset 20 */
    EW_K("IsNaN", ew_pred_run, NULL),
    EW_K("IsInf", ew_pred_run, NULL),
    EW_K("Not", ew_pred_run, NULL),
    EW_K("Cast", ew_cast_run, NULL),
    EW_K("CastLike", ew_cast_run, NULL),
    EW_K("Clip", ew_clip_run, NULL),
    EW_K("Identity", ew_identity_run, NULL),
    EW_K("Dropout", ew_dropout_run, ew_flag_scratch),
    /* ops/binary.c: the ops of ops/ew_binary.def (those that can divide an integer by zero
     * get the error flag), then the rest */
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    {NAME, DOMAIN, ew_binary_run, FR_BM_RAISES_##MATH ? ew_flag_scratch : NULL},
#define FR_BIN_VARIANT(ID, NAME, DOMAIN, MATH, DTYPES, VARIADIC, GRAD) /* not an op */
#include "ops/ew_binary.def"
    EW_K("Pow", ew_pow_run, ew_flag_scratch),
    EW_K("Where", ew_where_run, NULL),
    EW_K("Expand", ew_expand_run, NULL),
    /* ops/elementwise_grad.c */
    EW_G("ActivationGrad", ew_activation_grad_run, NULL),
    EW_G("PowGrad", ew_pow_grad_run, NULL),
    EW_G("FmodGrad", ew_fmod_grad_run, NULL),
    EW_G("ExtremumGrad", ew_extremum_grad_run, ew_extremum_grad_scratch),
    EW_G("ClipGrad", ew_clip_grad_run, ew_clip_grad_scratch),
    {NULL, NULL, NULL, NULL},
};
