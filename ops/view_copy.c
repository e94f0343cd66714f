/* The strided-copy engine of the layout ops (layout_plan.h): a contiguous output filled through
 * a view of the input. */
#include <string.h>

#include "ops/layout_plan.h"

/* dst[i] = src[i * st] for n elements of es bytes. */
static void copy_run(char *dst, const char *src, int64_t n, int64_t st, size_t es)
{
    if (st == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
#define RUN(T)                                                                                     \
    do {                                                                                           \
        T *d_ = (T *)(void *)dst;                                                                  \
        const T *s_ = (const T *)(const void *)src;                                                \
        for (int64_t i = 0; i < n; i++) d_[i] = s_[i * st];                                        \
    } while (0)
    switch (es) {
    case 1: RUN(uint8_t); break;
    case 2: RUN(uint16_t); break;
    case 4: RUN(uint32_t); break;
    case 8: RUN(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * es, src + i * st * (int64_t)es, es);
    }
#undef RUN
}

/* dst[r][c] = src[r + c * sc] for an R x C block: a transpose, walked in 8 x 8 tiles. With
 * power-of-two row lengths the lines of larger tiles fall into the same cache set and evict
 * each other (measured on 1024 x 1024 float32: 32 x 32 tiles 1.3 GB/s, 8 x 8 tiles 13 GB/s;
 * other sizes and a two-level blocking were no faster). */
static void transpose_2d(char *dst, const char *src, int64_t R, int64_t C, int64_t sc, size_t es)
{
    enum { TB = 8 };
#define TR(T)                                                                                      \
    do {                                                                                           \
        T *d_ = (T *)(void *)dst;                                                                  \
        const T *s_ = (const T *)(const void *)src;                                                \
        for (int64_t r0 = 0; r0 < R; r0 += TB)                                                     \
            for (int64_t c0 = 0; c0 < C; c0 += TB) {                                               \
                int64_t r1 = r0 + TB < R ? r0 + TB : R, c1 = c0 + TB < C ? c0 + TB : C;            \
                for (int64_t c = c0; c < c1; c++)                                                  \
                    for (int64_t r = r0; r < r1; r++) d_[r * C + c] = s_[r + c * sc];              \
            }                                                                                      \
    } while (0)
    switch (es) {
    case 1: TR(uint8_t); break;
    case 2: TR(uint16_t); break;
    case 4: TR(uint32_t); break;
    case 8: TR(uint64_t); break;
    default:
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                memcpy(dst + (size_t)(r * C + c) * es, src + (r + c * sc) * (int64_t)es, es);
    }
#undef TR
}

/* Fill the contiguous `dst` from `src` through the view. */
void fr_view_copy(char *dst, const char *src, fr_view v, size_t es)
{
    if (!fr_view_simplify(&v)) return;
    src += v.offset * (int64_t)es;
    if (v.rank == 0) {
        memcpy(dst, src, es);
        return;
    }
    /* inner block: a row, or a 2-D transpose when the last two dims are swapped */
    int tr = v.rank >= 2 && v.stride[v.rank - 2] == 1 && v.stride[v.rank - 1] != 1;
    int outer = v.rank - (tr ? 2 : 1);
    int64_t rows = tr ? v.dims[v.rank - 2] : 1, cols = v.dims[v.rank - 1];
    int64_t block = rows * cols, sc = v.stride[v.rank - 1];
    int64_t idx[FR_MAX_VIEW] = {0}, off = 0;
    for (;;) {
        if (tr)
            transpose_2d(dst, src + off * (int64_t)es, rows, cols, sc, es);
        else
            copy_run(dst, src + off * (int64_t)es, cols, sc, es);
        dst += (size_t)block * es;
        int k = outer - 1;
        for (; k >= 0; k--) {
            off += v.stride[k];
            if (++idx[k] < v.dims[k]) break;
            off -= v.stride[k] * v.dims[k];
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}
