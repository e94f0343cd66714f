/* The attributes of Linear, LinearGradData and LinearGradWeight (see linear.h): the precision and
 * recipe names and the one reader that shape inference, the gradient rule, the CPU kernels and
 * the CUDA launchers share, so every one of them refuses the same values with the same words. */
#include "ops/linear.h"

#include <string.h>

#include "graph/option_choices.h"
#include "ops/swiglu.h"

static const char *const k_precisions[] = {FR_CHOICES_PRECISION NULL};
static const char *const k_recipes[] = {FR_CHOICES_RECIPE NULL};
_Static_assert(FR_CHOICE_COUNT(k_precisions) == FR_LIN_FP8 + 1, "FR_CHOICES_PRECISION follows fr_lin_precision");
_Static_assert(FR_CHOICE_COUNT(k_recipes) == FR_LIN_BLOCKWISE + 1, "FR_CHOICES_RECIPE follows fr_lin_recipe");

fr_status fr_lin_precision_parse(const char *s, fr_lin_precision *out)
{
    int k = fr_choice_find(k_precisions, s);
    if (k < 0) return fr_error(FR_ERR_UNSUPPORTED, "precision '%s' is not one of fp32, bf16, fp8", s);
    *out = (fr_lin_precision)k;
    return FR_OK;
}

const char *fr_lin_precision_name(fr_lin_precision p)
{
    return k_precisions[p == FR_LIN_FP8 ? 2 : p == FR_LIN_BF16 ? 1 : 0];
}

fr_status fr_lin_recipe_parse(const char *s, fr_lin_recipe *out)
{
    int k = fr_choice_find(k_recipes, s);
    if (k < 0) return fr_error(FR_ERR_UNSUPPORTED, "recipe '%s' is not one of delayed, current, block", s);
    *out = (fr_lin_recipe)k;
    return FR_OK;
}

const char *fr_lin_recipe_name(fr_lin_recipe r)
{
    return k_recipes[r == FR_LIN_BLOCKWISE ? 2 : r == FR_LIN_CURRENT ? 1 : 0];
}


fr_status fr_lin_read_attrs(const fr_node *n, fr_lin_attrs *c)
{
    int64_t tb, margin, pad;
    const char *prec, *recipe, *fmt;
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    FR_TRY(fr_attr_bf16(n, "y_dtype", &c->y_bf16));
    FR_TRY(fr_attr_bf16(n, "dx_dtype", &c->dx_bf16));
    FR_TRY(fr_node_attr_string(n, "precision", "fp32", &prec));
    FR_TRY(fr_node_attr_string(n, "recipe", "delayed", &recipe));
    FR_TRY(fr_node_attr_string(n, "fp8_format", "hybrid", &fmt));
    FR_TRY(fr_node_attr_int(n, "margin", 0, &margin));
    FR_TRY(fr_node_attr_int(n, "pad_multiple", 1, &pad));
    if (tb != 0 && tb != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "transB=%lld (must be 0 or 1)", (long long)tb);
    if (fr_lin_precision_parse(prec, &c->prec) != FR_OK || fr_lin_recipe_parse(recipe, &c->recipe) != FR_OK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s", fr_last_error());
    if (strcmp(fmt, "hybrid") == 0)
        c->dy_fmt = FR_F8E5M2;
    else if (strcmp(fmt, "e4m3") == 0)
        c->dy_fmt = FR_F8E4M3;
    else
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "fp8_format '%s' is not one of hybrid, e4m3", fmt);
    if (margin < -64 || margin > 64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "margin %lld is outside [-64, 64]", (long long)margin);
    if (pad < 1 || pad > 4096)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "pad_multiple %lld is outside [1, 4096]", (long long)pad);
    if (c->y_bf16 && c->prec == FR_LIN_FP32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "y_dtype bfloat16 needs precision bf16 or fp8 (precision is fp32)");
    if (c->dx_bf16 && c->prec == FR_LIN_FP32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dx_dtype bfloat16 needs precision bf16 or fp8 (precision is fp32)");
    const char *glu;
    FR_TRY(fr_node_attr_string(n, "x_glu", "", &glu));
    FR_TRY(fr_attr_bf16(n, "x_glu_dtype", &c->x_glu_bf16));
    c->x_glu = -1;
    if (glu[0]) {
        if (fr_glu_act_parse(glu, &c->x_glu) != FR_OK)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute x_glu=\"%s\" (\"silu\", \"gelu_tanh\" or \"gelu\")",
                                 glu);
        if (c->prec != FR_LIN_FP8 || c->recipe == FR_LIN_BLOCKWISE)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "x_glu needs fp8 precision with a per-tensor recipe (%s, %s)",
                                 fr_lin_precision_name(c->prec), fr_lin_recipe_name(c->recipe));
    } else if (c->x_glu_bf16) {
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "x_glu_dtype without x_glu");
    }
    c->transB = (int)tb;
    c->margin = (int)margin;
    c->pad = pad;
    return FR_OK;
}
