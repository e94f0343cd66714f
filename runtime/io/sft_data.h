/* Supervised fine-tuning data: the SFT token file (python/fp8run/sft.py and
 * fp8run prepare --sft write it) and the windows the trainer takes from it.
 *
 * The file (little-endian):
 *    0  8 bytes  magic "FP8RSFT1"
 *    8  uint32   version 1
 *   12  uint32   token width in bytes (2: uint16, 4: uint32)
 *   16  uint64   examples E
 *   24  uint64   tokens N
 *   32  uint64   vocabulary size
 *   40  uint64   EOS id
 *   48  uint64   target tokens
 *   56  uint64   0 (reserved)
 *   64  uint64   offsets[E + 1]: example i is tokens[offsets[i] .. offsets[i+1]); offsets[0] = 0,
 *                offsets[E] = N, non-decreasing
 *       width    tokens[N]
 *       uint8    targets[N]: 1 where the token is a target (a label the loss counts), else 0
 * and nothing else: 64 + 8 (E + 1) + (width + 1) N bytes.
 *
 * Windows. The trainer's window is T + 1 token ids (inputs are the first T, labels the last T:
 * the token at j + 1 is the label of position j), and here also a segment id and a target flag
 * per token. An example of n tokens takes n consecutive slots of one window; an example longer
 * than T + 1 is cut to its first T + 1 tokens (counted: fr_sft_plan.truncated).
 *  - packing on: first fit over the last FR_SFT_OPEN_WINDOWS windows opened: each example, in
 *    file order, goes into the oldest of them with room for it (tokens, and fewer than
 *    FR_SFT_MAX_EXAMPLES examples so far), else into a new window (the
 *    oldest one is then closed when more are open). Windows come in the order they were
 *    opened, each holding its examples in file order; segment ids are 1, 2, 3, ... per example
 *    within a window, 0 on the padding after them. (Filling windows strictly in file order
 *    leaves a quarter of them padding for lengths spread evenly up to T + 1; this leaves a few
 *    percent, and examples stay close to their place in the file.)
 *  - packing off: one example per window, then padding (segment 1, then 0).
 * Padding slots hold token id pad (the file's EOS) and are never targets. The first token of
 * each example is never a target (nothing before it in its example predicts it). Position j's
 * label counts when targets[j + 1] is 1 (then segment[j + 1] == segment[j] != 0); its position
 * id is j minus the first slot of its example. */
#ifndef FR_SFT_DATA_H
#define FR_SFT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#define FR_SFT_MAGIC "FP8RSFT1"
#define FR_SFT_HEADER 64
#define FR_SFT_OPEN_WINDOWS 64 /* packing: windows an example may still go into */
/* packing: examples one window holds at most. A window's segments (its examples and the padding
 * after them) are the variable-length sequences of cuDNN's attention, which plans a fixed number
 * of sequence slots per window (64, ops/cuda/attention_cudnn_ragged.h); 63 examples and the
 * padding fit that, so no packed window ever needs more slots than the plan has. Full windows of
 * examples shorter than 33 tokens leave some padding for it. */
#define FR_SFT_MAX_EXAMPLES 63

/* A parsed SFT token file over memory the caller keeps (a mapping). */
typedef struct fr_sft_view {
    const unsigned char *offsets; /* E + 1 little-endian uint64 */
    const unsigned char *tokens;
    const unsigned char *targets;
    int width;                    /* 2 or 4 */
    int64_t examples, tokens_n, vocab, eos, target_tokens;
} fr_sft_view;

/* 1 when buf (len bytes) starts with the SFT magic. */
int fr_sft_is_sft(const void *buf, size_t len);
/* Check the header, the size, the offsets and the flags of a whole file in memory; errors name
 * path and what is wrong. */
FR_NODISCARD fr_status fr_sft_parse(const void *buf, size_t len, const char *path, fr_sft_view *out);

/* Example i's [start, end) token range. */
void fr_sft_example(const fr_sft_view *v, int64_t i, int64_t *start, int64_t *end);

/* The window of each of n examples of lengths len (each <= cap) packed as above, into
 * window_of (n entries); returns the number of windows. python/fp8run/sft.py's pack_count does
 * the same. */
int64_t fr_sft_pack(const int64_t *len, int64_t n, int64_t cap, int64_t *window_of);

/* How the examples go into windows of T + 1 tokens. */
typedef struct fr_sft_plan {
    int64_t windows;
    int64_t *order;      /* the examples, window by window (file order within a window) */
    int64_t *first;      /* windows + 1 entries: window w holds order[first[w] .. first[w+1]-1] */
    int64_t truncated;   /* examples cut to T + 1 tokens */
    int64_t slots_used;  /* example tokens placed (after cutting) */
    int64_t target_labels; /* labels that count, over all windows */
} fr_sft_plan;

FR_NODISCARD fr_status fr_sft_plan_windows(const fr_sft_view *v, int64_t T, int packing, fr_sft_plan *out);
void fr_sft_plan_free(fr_sft_plan *p);

/* Window w: T + 1 token ids, segment ids and target flags (any of the three may be NULL). */
void fr_sft_window(const fr_sft_view *v, const fr_sft_plan *p, int64_t w, int64_t T, int64_t *tokens,
                   int32_t *segments, uint8_t *targets);

/* Labels of one window (T of them) from its T + 1 tokens, segments and targets: the next
 * token where it counts, else ignore_index (labels may be NULL: only count). Returns how many
 * count. */
int64_t fr_sft_labels(const int64_t *tokens, const int32_t *segments, const uint8_t *targets, int64_t T,
                      int64_t ignore_index, int64_t *labels);
/* Position ids of one window (T): restarting at 0 at each example, 0 on padding. */
void fr_sft_positions(const int32_t *segments, int64_t T, int64_t *positions);

/* ---- writing (fp8run prepare --sft with the byte-level tokenizer) ----
 * JSONL files of {"prompt","completion"} or {"messages":[{"role","content"}..]} lines into an
 * SFT token file of byte tokens (vocabulary 256, EOS 0), as python/fp8run/sft.py's
 * BytesEncoder: prompt bytes, completion bytes, EOS (targets: the completion and EOS); a
 * message is "ROLE: CONTENT\n" (the assistant's "CONTENT\n" a target), EOS after the last
 * (a target when the last message is the assistant's). max_tokens > 0: longer examples are cut
 * (drop_long 0) or dropped (1); an example left without a target is dropped. The last
 * val_fraction of the examples go to val_path (when > 0). */
typedef struct fr_sft_prepare {
    const char *const *files;
    int n_files;
    const char *out, *val_out;
    double val_fraction;
    int64_t max_tokens;
    int drop_long;
    int train_on_prompt;
    int skip_bad_lines;
} fr_sft_prepare;

typedef struct fr_sft_summary {
    int64_t examples, train_examples, val_examples, tokens, target_tokens;
    int64_t bad_lines, truncated, dropped, no_target;
    int64_t windows_packed; /* with max_tokens: windows of max_tokens tokens, packed / one each */
} fr_sft_summary;

FR_NODISCARD fr_status fr_sft_prepare_bytes(const fr_sft_prepare *p, fr_sft_summary *s);

#endif
