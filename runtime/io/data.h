/* Token data loader: batches of B windows of T+1 consecutive token ids from a token file.
 * Window b of a batch is tokens[start_b .. start_b + T]; the caller uses the first T as the
 * model's inputs and the last T as the labels (fr_data_split does that copy).
 *
 * File formats (the file is mapped read-only; when mmap fails, or opts.no_mmap is set, it is
 * read into memory instead):
 *  - raw: little-endian uint16 or uint32 token ids, nothing else (opts.token_dtype); or uint8:
 *    any file as bytes, so a byte-level model trains on a text file as it is;
 *  - llm.c: a header of 256 little-endian int32 (header[0] magic, header[1] version,
 *    header[2] token count) followed by the tokens; magic 20240520 with version 1 holds uint16
 *    tokens (GPT-2), magic 20240801 with version 7 uint32 tokens (LLaMA 3). Detected by the
 *    magic unless opts.format is FR_DATA_RAW; the count must match the file size exactly.
 *    In this format the header decides the token width and opts.token_dtype is ignored.
 *
 * Orders:
 *  - FR_DATA_RANDOM: each window's start is drawn independently and uniformly from
 *    [0, n - T - 1] (fr_prng_below(n - T), b = 0..B-1 in order) with the loader's xoshiro256**
 *    generator seeded from opts.seed. The epoch count is tokens drawn / n (B*T per batch).
 *  - FR_DATA_SEQUENTIAL: batch k of an epoch takes window b from start p + b*T, where
 *    p = k*B*T: the inputs of consecutive windows do not overlap and the label of each window's
 *    last position is the first input of the next one (as llm.c's loader). When the next batch
 *    would run past the end (p + B*T + 1 > n) the loader wraps to p = 0 and counts an epoch;
 *    the tail that does not fill a batch is skipped.
 *
 * Every file must hold at least B*(T+1) tokens (one batch of B separate windows).
 *
 * Token ids are checked batch by batch, not once over the file at open (a whole-file scan of a
 * multi-GB corpus would be paid at every start): when opts.vocab_size > 0 every token copied
 * into a batch must be < vocab_size, else the batch fails with FR_ERR_RANGE naming the file,
 * the token's position in the file (token index from the first token) and its id, and the
 * loader's state is left as it was before the call. fr_data_check_tokens() scans a whole file
 * on demand.
 *
 * SFT token files (runtime/io/sft_data.h, prepare --sft) are recognized by their header (format
 * auto). Their unit is the window, not the token: the examples fill windows of T + 1 tokens
 * (opts.packing 1: several per window; 0: one each, padded), a random batch draws each of its B
 * windows uniformly, a sequential one takes the next B windows (epochs count windows; the last
 * batch of a pass is filled up with empty windows, all padding, so that every example is seen). fr_data_next refuses them; fr_data_next_sft gives the windows' tokens with their
 * segment ids and target flags.
 *
 * The loader's state (generator state, position, epoch, batches produced) can be saved as
 * FR_DATA_STATE_BYTES bytes and restored exactly; the bytes also record B, T, the order and the
 * file's token count, and restoring into a loader with a different setup is an error. */
#ifndef FR_DATA_H
#define FR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "graph/tensor.h"
#include "graph/rng.h"
#include "graph/status.h"

#define FR_LLMC_MAGIC_U16 20240520 /* llm.c GPT-2 files, version 1 */
#define FR_LLMC_MAGIC_U32 20240801 /* llm.c LLaMA-3 files, version 7 */
#define FR_LLMC_HEADER_INTS 256

typedef enum fr_data_order { FR_DATA_RANDOM = 0, FR_DATA_SEQUENTIAL = 1 } fr_data_order;
typedef enum fr_data_format {
    FR_DATA_AUTO = 0, /* llm.c when the file starts with one of its magics, else raw */
    FR_DATA_RAW = 1   /* always raw */
} fr_data_format;

typedef struct fr_data_opts {
    int64_t batch;         /* B >= 1 */
    int64_t seq_len;       /* T >= 1 */
    fr_data_order order;
    uint64_t seed;         /* FR_DATA_RANDOM */
    fr_dtype token_dtype;  /* raw files: FR_U8, FR_U16 or FR_U32 (FR_UNDEFINED means FR_U16) */
    fr_data_format format;
    int64_t vocab_size;    /* > 0: check every token of every batch against it */
    int no_mmap;           /* 1: read the file into memory instead of mapping it */
    int64_t max_batches;   /* sequential only, > 0: wrap to the start after this many batches
                              (a validation pass); 0: wrap only at the end of the file */
    int packing;           /* SFT files: 1 (default) several examples per window, 0 one */
} fr_data_opts;

/* Defaults: B = 1, T = 1, random, seed 0, uint16 raw tokens, format auto, no vocab check. */
fr_data_opts fr_data_opts_default(void);

typedef struct fr_data_loader fr_data_loader;

FR_NODISCARD fr_status fr_data_open(const char *path, const fr_data_opts *opts, fr_data_loader **out);
/* A validation loader: sequential whatever opts.order says, num_batches batches per pass
 * (each pass sees the same batches: after num_batches it wraps to the start; fr_data_reset
 * also rewinds). num_batches == 0 takes as many batches as the file holds. The file must hold
 * num_batches*B*T + 1 tokens (and B*(T+1)), else FR_ERR_SHAPE naming the file. */
FR_NODISCARD fr_status fr_data_open_val(const char *path, const fr_data_opts *opts, int64_t num_batches,
                           fr_data_loader **out);
void fr_data_close(fr_data_loader *dl);

/* Write the next batch, B x (T+1) token ids row-major, into `windows` as out_dtype FR_I32 or
 * FR_I64. uint32 ids above INT32_MAX do not fit FR_I32: FR_ERR_RANGE. On any error the
 * loader's state is unchanged. */
FR_NODISCARD fr_status fr_data_next(fr_data_loader *dl, fr_dtype out_dtype, void *windows);
/* SFT files: the next batch's B x (T+1) token ids, segment ids (0 on padding) and target flags
 * (runtime/io/sft_data.h); *n_labels (may be NULL) gets how many of its B x T labels count. */
FR_NODISCARD fr_status fr_data_next_sft(fr_data_loader *dl, int64_t *windows, int32_t *segments, uint8_t *targets,
                                        int64_t *n_labels);
int fr_data_is_sft(const fr_data_loader *dl);
typedef struct fr_data_sft_stats {
    int64_t examples, windows, truncated; /* truncated: cut to T + 1 tokens */
    int64_t tokens;        /* example tokens in the windows (after cutting) */
    int64_t target_labels; /* labels that count, over all windows */
    int64_t eos, vocab;    /* the file's EOS (the padding id) and vocabulary size */
    int64_t max_examples;  /* the most examples one window holds */
} fr_data_sft_stats;
/* All zero for a token file. */
void fr_data_sft_info(const fr_data_loader *dl, fr_data_sft_stats *s);

/* Split B x (T+1) windows into inputs (first T of each) and labels (last T), each B x T,
 * all of element type dtype (FR_I32 or FR_I64; others are FR_ERR_UNSUPPORTED). */
FR_NODISCARD fr_status fr_data_split(const void *windows, fr_dtype dtype, int64_t batch, int64_t seq_len,
                        void *inputs, void *labels);
/* Scan every token of the file: FR_ERR_RANGE naming the first id >= vocab_size and its
 * position. */
FR_NODISCARD fr_status fr_data_check_tokens(const fr_data_loader *dl, int64_t vocab_size);

/* Rewind: position 0, epoch 0, no batches produced, generator re-seeded from opts.seed. */
void fr_data_reset(fr_data_loader *dl);

const char *fr_data_path(const fr_data_loader *dl);
int64_t fr_data_num_tokens(const fr_data_loader *dl);
fr_dtype fr_data_token_dtype(const fr_data_loader *dl); /* FR_U8, FR_U16 or FR_U32 */
int fr_data_is_llmc(const fr_data_loader *dl);
int fr_data_is_mapped(const fr_data_loader *dl);        /* 0 when the file was read */
const fr_data_opts *fr_data_options(const fr_data_loader *dl);
int64_t fr_data_batches(const fr_data_loader *dl);      /* batches produced since open/reset */
int64_t fr_data_epoch(const fr_data_loader *dl);        /* completed epochs (see above) */
/* Sequential: batches in one pass (an epoch, or max_batches when set). Random: n / (B*T). */
int64_t fr_data_batches_per_epoch(const fr_data_loader *dl);
/* Sequential: token index of the next batch's first window. Random: 0. */
int64_t fr_data_position(const fr_data_loader *dl);

#define FR_DATA_STATE_BYTES 96
/* The state as FR_DATA_STATE_BYTES bytes (little-endian fields; layout in data.c). */
void fr_data_get_state(const fr_data_loader *dl, uint8_t out[FR_DATA_STATE_BYTES]);
/* Restore a saved state. Wrong length or marker is FR_ERR_PARSE; a state saved by a loader
 * with another batch shape, order or token count, or a position that is not a batch start of
 * this file, is FR_ERR_INVALID_ARG naming the file. The loader is unchanged on error. */
FR_NODISCARD fr_status fr_data_set_state(fr_data_loader *dl, const void *bytes, size_t len);

#endif
