/* Checked access to the fp8run.* metadata of a compiled graph file, shared by the .fbs readers
 * (fbs_read.c, fbs_original.c). Every lookup checks what it reads (a .fbs is hostile input) and
 * names the file and the key in its error. */
#ifndef FR_FBS_META_H
#define FR_FBS_META_H

#include <stdint.h>

#include "graph/ir.h"
#include "graph/name_map.h"
#include "runtime/io/fbs.h"

typedef struct fr_fbs_meta {
    const fr_graph *g;
    const char *what;   /* the file, for messages */
    fr_name_map *map;   /* fp8run.* key -> metadata index */
    int n_keys;
} fr_fbs_meta;

/* Index g's fp8run.* keys (what: the file, for messages); a key given twice is an error. */
FR_NODISCARD fr_status fr_fbs_meta_open(const fr_graph *g, const char *what, fr_fbs_meta *m);
void fr_fbs_meta_close(fr_fbs_meta *m);

/* The value of a key (printf-formatted) or NULL; required keys that are absent are an error. */
FR_NODISCARD fr_status fr_fbs_get_str(const fr_fbs_meta *m, int required, const char **out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An integer in [lo, hi]. */
FR_NODISCARD fr_status fr_fbs_get_int(const fr_fbs_meta *m, int64_t lo, int64_t hi, int64_t *out, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* One of `choices` (NULL-terminated); *out its index. */
FR_NODISCARD fr_status fr_fbs_get_choice(const fr_fbs_meta *m, const char *const *choices, int *out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A count: at most the number of fp8run keys (a hostile count must not allocate). */
FR_NODISCARD fr_status fr_fbs_get_count(const fr_fbs_meta *m, int64_t *out, const char *key);
/* FR_ERR_PARSE naming the file and the key, with a printf-style reason. */
FR_NODISCARD fr_status fr_fbs_bad(const fr_fbs_meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Copies (NULL stays NULL); dup_const's is owned by the decoded spec (freed by spec_free). */
FR_NODISCARD fr_status fr_fbs_dup(const char *s, char **out);
FR_NODISCARD fr_status fr_fbs_dup_const(const char *s, const char **out);
/* The fp8run.format key says a format this build reads. */
FR_NODISCARD fr_status fr_fbs_check_format(const fr_fbs_meta *m);
/* the name for messages: what, else g's source path, else "<memory>" */
const char *fr_fbs_file_name(const fr_graph *g, const char *what);

/* the values the metadata uses for enumerations */
extern const char *const fr_fbs_k_bool[], *const fr_fbs_k_prec[], *const fr_fbs_k_recipe[], *const fr_fbs_k_format[],
    *const fr_fbs_k_algo[], *const fr_fbs_k_operand[], *const fr_fbs_k_fmt8[], *const fr_fbs_k_source[];

/* fbs_original.c: the fused table, checked against the fused parameters of g (value ids from g) */
FR_NODISCARD fr_status fr_fbs_read_fused(const fr_fbs_meta *m, const fr_graph *g, fr_fp8_fused **out, int *n_out);
/* The ties, with source ids from g; copy ids -1 (the copies are not in the file). Their names go
 * to names[i] (pointing into the metadata). */
FR_NODISCARD fr_status fr_fbs_read_ties(const fr_fbs_meta *m, const fr_graph *g, fr_fbs_spec *s, const char ***names);
/* the tie's source in g (transposed when the tie says so) into t, which has the copy's shape;
 * 0 when t's dtype or shape does not fit */
int fr_fbs_copy_tie(const fr_graph *g, const fr_tie *tie, fr_tensor *t);
/* The original model stored in the file (fp8run.original_model), with the compiled file's
 * values copied back into its parameters (fs, nf: the fused table). */
FR_NODISCARD fr_status fr_fbs_read_original(const fr_fbs_meta *m, const fr_graph *file, const fr_fp8_fused *fs, int nf,
                               const fr_fbs_spec *spec, const char **tie_names, fr_graph **out);

#endif
