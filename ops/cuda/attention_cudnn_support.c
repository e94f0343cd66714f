/* What cuDNN's SDPA takes, in words and as a check (attention_cudnn_sdpa.h), and the graphs
 * built without a device for tests. */
#include <stdio.h>
#include <string.h>

#include "ops/cuda/attention_cudnn_graph.h"

/* The largest head dim cuDNN's flash engines take (cudnn-frontend's support surface): 256 on
 * Hopper from 9.0, on Ampere from 9.10, on Blackwell from 9.9; else 128. cc_major 0 (not
 * known): the version's best. */
static int64_t max_head_dim(size_t version, int cc_major)
{
    if (version < 90000) return 128;
    if (cc_major == 0 || cc_major == 9) return 256;
    if (cc_major == 8) return version >= 91000 ? 256 : 128;
    return version >= 90900 ? 256 : 128;
}

/* Versions that take the features (cudnn-frontend's checks and samples): the sliding window
 * (a left bound on the diagonal band) from 9.2, with the padding mask from 9.10.2; score
 * modifiers such as the softcap from 9.4, on Hopper or newer. */
#define V_WINDOW 90200
#define V_WINDOW_PADDED 91002
#define V_SOFTCAP 90400
#define V_SEGMENTS 90900 /* the document mask of cudnn-frontend's flexible-graph tests */
/* Ragged offsets on Stats (token-major statistics), with grouped K/V heads, and on the
 * backward's row sums and dQ accumulator (cudnn-frontend's max_total_seq_len sizing): 9.6,
 * on Hopper or newer (older architectures only from 9.18.1). */
#define V_RAGGED 90600

/* Whether this version and GPU take variable-length (ragged) sequences. */
static int ragged_ok(size_t version, int cc_major) { return version >= V_RAGGED && (cc_major == 0 || cc_major >= 9); }

void fr_cudnn_sdpa_describe_support(size_t version, int cc_major, char *buf, size_t n)
{
    const int softcap = version >= V_SOFTCAP && (cc_major == 0 || cc_major >= 9);
    snprintf(buf, n,
             "head dims multiples of 8 up to %lld (D != Dv allowed), causal%s, key padding (seg_form padded)%s%s",
             (long long)max_head_dim(version, cc_major), version >= V_WINDOW ? ", sliding window" : "",
             softcap ? ", softcap" : "",
             ragged_ok(version, cc_major) ? ", packed sequences (seg_form packed: each example a variable-length "
                                            "sequence, head dims multiples of 16; the backward at head dims up to "
                                            "128 with Q, K, V apart, not on the fused Q/K/V projection)"
                                          : "");
}

int fr_cudnn_sdpa_supported(const fr_cudnn_sdpa *p, size_t version, int cc_major, char *why, size_t n)
{
#define NO(...)                        \
    do {                               \
        snprintf(why, n, __VA_ARGS__); \
        return 0;                      \
    } while (0)
    if (version == 91000 || version == 91001)
        NO("cuDNN 9.10.0 and 9.10.1 have known bugs in SDPA (cudnn-frontend refuses them); use 9.10.2 or newer");
    if (cc_major && cc_major < 8) NO("cuDNN's fused flash attention needs compute capability 8.0 or newer");
    if (p->b < 1 || p->hq < 1 || p->hk < 1 || p->tq < 1 || p->tk < 1 || p->d < 1 || p->dv < 1) NO("an empty dimension");
    if (p->hq % p->hk)
        NO("%lld query heads do not split into groups over %lld K/V heads", (long long)p->hq, (long long)p->hk);
    const int64_t dmax = max_head_dim(version, cc_major);
    if (p->d % 8 || p->dv % 8 || p->d > dmax || p->dv > dmax)
        NO("head dims %lld, %lld: cuDNN %zu.%zu's flash attention takes multiples of 8 up to %lld here",
           (long long)p->d, (long long)p->dv, version / 10000, version / 100 % 100, (long long)dmax);
    if (p->causal && p->tq != p->tk) NO("a causal mask with Tq %lld != Tk %lld", (long long)p->tq, (long long)p->tk);
    if (p->window < 0 || (p->window > 0 && !p->causal)) NO("a sliding window without the causal mask");
    if (p->window > 0 && version < V_WINDOW) NO("a sliding window (cuDNN 9.2 or newer)");
    if (p->window > 0 && p->padded && version < V_WINDOW_PADDED)
        NO("a sliding window with key padding (cuDNN 9.10.2 or newer)");
    /* Seen on an H200 with cuDNN 9.14: the backward graph with the document mask plans and
     * runs, but its dQ, dK, dV are wrong (relative L2 0.9 to 3 against the reference) where the
     * forward is right. Until a version is seen right, packed sequences train with cuDNN's
     * forward and fp8run's backward (the LSE is the same). */
    if (p->backward && p->segments)
        NO("packed sequences in the backward (cuDNN 9.14's document-mask backward was seen wrong; the forward is "
           "right)");
    if (p->segments && (p->padded || version < V_SEGMENTS))
        NO("segment ids (a document mask: cuDNN 9.9 or newer, not with key lengths)");
    if (p->ragged) {
        if (!ragged_ok(version, cc_major))
            NO("packed sequences as variable-length sequences (ragged offsets: cuDNN 9.6 or newer on compute "
               "capability 9.0 or newer)");
        if (!p->padded || p->segments || p->tq != p->tk)
            NO("variable-length sequences without their lengths, with a document mask, or with Tq != Tk");
        if (p->d % 16 || p->dv % 16)
            NO("head dims %lld, %lld with packed sequences (cuDNN's variable-length sequences: multiples of 16)",
               (long long)p->d, (long long)p->dv);
        /* Seen on an H200 with cuDNN 9.14.0: the variable-length forward right in every case
         * tried; the backward right at head dims 64 and 128 with Q, K, V (so dQ, dK, dV) each
         * in its own token-major [tokens, heads, dim] buffer, but wrong at head dim 256
         * (relative L2 0.6-0.7) and, on AttentionQKV's Q, K, V interleaved in one row of the
         * projection, non-finite dX and then an illegal instruction. Those backwards run on
         * fp8run's kernels, which read the forward's LSE as it is. */
        if (p->backward && (p->d > 128 || p->dv > 128))
            NO("packed sequences in the backward at head dims over 128 (cuDNN 9.14's variable-length backward "
               "was seen wrong there; the forward is right)");
        if (p->backward && (p->sq[2] != p->hq * p->d || p->sk[2] != p->hk * p->d || p->sv[2] != p->hk * p->dv))
            NO("packed sequences in the backward with Q, K, V interleaved in one row (cuDNN 9.14's "
               "variable-length backward was seen wrong there; the forward is right)");
    }
    if (p->softcap < 0) NO("a negative softcap");
    if (p->softcap > 0 && (version < V_SOFTCAP || (cc_major && cc_major < 9)))
        NO("softcap (a score modifier: cuDNN 9.4 or newer on compute capability 9.0 or newer)");
    if (p->backward && p->tq == 1 && p->tk == 1) NO("one query and one key (cuDNN's backward refuses s_q = s_kv = 1)");
    if (p->fp8_bf16_io && !p->fp8) NO("bf16 I/O of the FP8 graphs without fp8");
    if (p->engine_skip < 0) NO("a negative engine_skip");
    if (p->fp8) { /* cudnn-frontend's checks of its FP8 SDPA nodes; the graphs here: plain or causal */
        if (version < 90100 || (cc_major && cc_major < 9))
            NO("FP8 attention (cuDNN 9.1 or newer on compute capability 9.0 or newer)");
        if (p->window > 0 || p->softcap > 0 || p->padded || p->segments || p->ragged)
            NO("FP8 attention with a sliding window, softcap, key lengths or packed sequences (its graphs are "
               "plain or causal)");
        if (p->d % 16 || p->dv % 16)
            NO("FP8 attention at head dims %lld, %lld (multiples of 16)", (long long)p->d, (long long)p->dv);
        if (p->backward && cc_major <= 9 && (p->d != 128 || p->dv != 128))
            NO("FP8 attention's backward at head dims %lld, %lld (cuDNN's FP8 backward takes 128 only on Hopper)",
               (long long)p->d, (long long)p->dv);
    }
    if (p->sq[3] != 1 || p->sk[3] != 1 || p->sv[3] != 1 || p->so[3] != 1)
        NO("a head dim that is not contiguous (feature stride != 1)");
    return 1;
#undef NO
}

fr_status fr_cudnn_sdpa_check_graph(const frdnn_api *api, size_t version, const fr_cudnn_sdpa *p, int *graph_finalized,
                                    int *n_ops)
{
    *graph_finalized = 0;
    *n_ops = 0;
    char text[512];
    if (!fr_cudnn_sdpa_supported(p, version, 0, text, sizeof text))
        return fr_error(FR_ERR_UNSUPPORTED, "cuDNN attention: %s", text);
    gb b = {.api = api};
    fr_cudnn_graph(&b, p, version);
    *n_ops = b.n_ops;
    if (b.failed) {
        fr_status st = fr_error(FR_ERR_UNSUPPORTED, "cuDNN attention graph: %s", b.why);
        fr_cudnn_gb_free(&b);
        return st;
    }
    frdnn_desc og = fr_cudnn_op_graph(&b, NULL); /* without a handle: cuDNN may want a device for this */
    *graph_finalized = og != NULL;
    fr_cudnn_gb_free(&b);
    return FR_OK;
}
