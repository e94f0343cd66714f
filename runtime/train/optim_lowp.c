/* Low-precision AdamW state (bf16, block-scaled fp8) and bf16 master weights on the CPU: the
 * reference the CUDA optimizer is compared against. Formats and arithmetic: optim_lowp.h. */
#include "runtime/train/optim_lowp.h"

int64_t fr_lowp_state_bytes(fr_opt_state_dtype dt, int64_t n)
{
    switch (dt) {
    case FR_OPT_STATE_F32: return n * 4;
    case FR_OPT_STATE_BF16: return n * 2;
    case FR_OPT_STATE_FP8: return n + (n + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK * 4;
    }
    return 0;
}

const char *fr_lowp_state_name(fr_opt_state_dtype dt)
{
    switch (dt) {
    case FR_OPT_STATE_F32: return "fp32";
    case FR_OPT_STATE_BF16: return "bf16";
    case FR_OPT_STATE_FP8: return "fp8";
    }
    return NULL;
}

void fr_lowp_quantize_blocks(const float *x, int64_t n, uint8_t *codes, float *scales)
{
    for (int64_t b0 = 0; b0 < n; b0 += FR_LOWP_BLOCK) {
        int64_t e = b0 + FR_LOWP_BLOCK < n ? b0 + FR_LOWP_BLOCK : n;
        float amax = 0;
        for (int64_t k = b0; k < e; k++) amax = fr_lowp_absmax(amax, x[k]);
        float s = fr_lowp_block_scale(amax);
        scales[b0 / FR_LOWP_BLOCK] = s;
        for (int64_t k = b0; k < e; k++) codes[k] = fr_lowp_encode(x[k], s);
    }
}

void fr_lowp_dequantize_blocks(const uint8_t *codes, const float *scales, int64_t n, float *out)
{
    for (int64_t k = 0; k < n; k++) out[k] = fr_lowp_decode(codes[k], scales[k / FR_LOWP_BLOCK]);
}

/* The moments of elements [b0, e) as float32. */
static void load_block(fr_opt_state_dtype dt, const void *m, const void *v, const float *ms, const float *vs,
                       int64_t b0, int64_t e, float *mf, float *vf)
{
    for (int64_t k = b0; k < e; k++) {
        float mk, vk;
        if (dt == FR_OPT_STATE_F32) {
            mk = ((const float *)m)[k];
            vk = ((const float *)v)[k];
        } else if (dt == FR_OPT_STATE_BF16) {
            mk = fr_lowp_from_bf16(((const uint16_t *)m)[k]);
            vk = fr_lowp_from_bf16(((const uint16_t *)v)[k]);
        } else {
            mk = fr_lowp_decode(((const uint8_t *)m)[k], ms[k / FR_LOWP_BLOCK]);
            float w = fr_lowp_decode(((const uint8_t *)v)[k], vs[k / FR_LOWP_BLOCK]);
            vk = FR_LOWP_MUL(w, w);
        }
        mf[k - b0] = mk;
        vf[k - b0] = vk;
    }
}

static void store_block(fr_opt_state_dtype dt, void *m, void *v, float *ms, float *vs, int64_t b0, int64_t e,
                        float *mf, float *vf)
{
    if (dt == FR_OPT_STATE_F32) {
        memcpy((float *)m + b0, mf, (size_t)(e - b0) * sizeof(float));
        memcpy((float *)v + b0, vf, (size_t)(e - b0) * sizeof(float));
        return;
    }
    if (dt == FR_OPT_STATE_BF16) {
        for (int64_t k = b0; k < e; k++) {
            ((uint16_t *)m)[k] = fr_lowp_to_bf16(mf[k - b0]);
            ((uint16_t *)v)[k] = fr_lowp_to_bf16(vf[k - b0]);
        }
        return;
    }
    for (int64_t k = 0; k < e - b0; k++) vf[k] = FR_LOWP_SQRT(vf[k]);
    fr_lowp_quantize_blocks(mf, e - b0, (uint8_t *)m + b0, ms + b0 / FR_LOWP_BLOCK);
    fr_lowp_quantize_blocks(vf, e - b0, (uint8_t *)v + b0, vs + b0 / FR_LOWP_BLOCK);
}

void fr_lowp_adamw_step(const fr_lowp_adamw *a, fr_opt_state_dtype dt, float *p, const float *g, int64_t n,
                        void *m, void *v, float *ms, float *vs, int master_bf16, uint64_t key)
{
    float mf[FR_LOWP_BLOCK], vf[FR_LOWP_BLOCK];
    for (int64_t b0 = 0; b0 < n; b0 += FR_LOWP_BLOCK) {
        int64_t e = b0 + FR_LOWP_BLOCK < n ? b0 + FR_LOWP_BLOCK : n;
        load_block(dt, m, v, ms, vs, b0, e, mf, vf);
        for (int64_t k = b0; k < e; k++) {
            float pk = fr_lowp_adamw_elem(a, p[k], g[k], &mf[k - b0], &vf[k - b0]);
            p[k] = master_bf16 ? fr_lowp_sr_bf16(pk, key, k) : pk;
        }
        store_block(dt, m, v, ms, vs, b0, e, mf, vf);
    }
}
