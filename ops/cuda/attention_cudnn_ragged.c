/* Packed sequences as cuDNN's variable-length sequences: the host reference (attention_cudnn_ragged.h). */
#include "ops/cuda/attention_cudnn_ragged.h"

int64_t fr_cudnn_ragged_slots(int64_t windows, int64_t T, int64_t per_window)
{
    const int64_t want = per_window > 0 ? per_window : FR_CUDNN_RAGGED_PER_WINDOW;
    const int64_t per = T < want ? T : want;
    return windows * (per > 0 ? per : 1);
}

static int64_t id_at(const void *sk, int sk64, int64_t i)
{
    return sk64 ? ((const int64_t *)sk)[i] : (int64_t)((const int32_t *)sk)[i];
}

int64_t fr_cudnn_ragged_reference(const void *sk, int sk64, int64_t windows, int64_t T, int64_t hq, int64_t per_row,
                                  int64_t slots, int32_t *start, int32_t *len)
{
    const int64_t tokens = windows * T;
    int64_t n = 0;
    for (int64_t r = 0; r < windows; r++) {
        const int64_t row = r * hq / per_row;
        for (int64_t j = 0; j < T; j++) {
            const int first = j == 0 || id_at(sk, sk64, row * T + j) != id_at(sk, sk64, row * T + j - 1);
            if (!first) continue;
            if (n < slots) start[n] = (int32_t)(r * T + j);
            n++;
        }
    }
    const int64_t used = n < slots ? n : slots;
    for (int64_t k = 0; k < slots; k++) {
        if (k >= used) {
            start[k] = (int32_t)tokens, len[k] = 0;
            continue;
        }
        /* a sequence ends where the next one starts, or at its window's end */
        const int64_t s = start[k], window_end = (s / T + 1) * T;
        const int64_t next = k + 1 < used ? start[k + 1] : n > used ? s + 1 : tokens;
        len[k] = (int32_t)((next < window_end ? next : window_end) - s);
    }
    return n;
}
