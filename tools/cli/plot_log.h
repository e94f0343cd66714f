/* The training logs `fp8run plot` draws (train --log JSONL, with --log-fp8 records), read
 * from memory into a page of charts: one reader for the command and its fuzz target
 * (tests/fuzz/fuzz_plot_log.c). A log is untrusted text: every record is checked, lookups are
 * hashed (10^5 FP8 layers cost what 10 do, per record), and a point whose step or value no
 * chart can place (|step| > PLOT_MAX_STEP, |value| > PLOT_MAX_VALUE) is dropped and counted. */
#ifndef FP8RUN_TOOLS_PLOT_LOG_H
#define FP8RUN_TOOLS_PLOT_LOG_H

#include <stddef.h>

#include "plot_panel.h"

#define PLOT_MAX_STEP 1e15  /* beyond any run: 10^15 steps */
#define PLOT_MAX_VALUE 1e100 /* a span no axis maps without overflow */

enum { P_LOSS, P_LR, P_TPS, P_GNORM, P_FP8 /* then amax and range use per operand */ };
#define PLOT_N_OPERANDS 3
#define PLOT_N_PANELS (P_FP8 + 2 * PLOT_N_OPERANDS)

typedef struct plot_page {
    plot_panel p[PLOT_N_PANELS];
    double xlo, xhi;
    int n_runs, n_layers;
    char **layers;        /* every FP8 layer seen, for one color per layer */
    plot_index layer_ix;  /* layer name -> its index in layers */
    long long dropped;    /* points with an absurd step or value */
} plot_page;

/* An empty page for n_runs logs, its charts titled. */
void plot_page_init(plot_page *pg, int n_runs);
void plot_page_free(plot_page *pg);
/* Add the records of one log (run: its index, label: its name in legends; data: len bytes,
 * path: for messages). Returns 0, or -1 with a message "PATH:LINE: what" in err. A log
 * without any record is an error too. */
int plot_page_read(plot_page *pg, int run, const char *label, const char *data, size_t len, const char *path,
                   char *err, size_t errlen);
/* "runs/a.jsonl" -> "a" (cut on a character boundary) */
void plot_run_label(const char *path, char *buf, size_t n);
/* The longest prefix of s that fits n - 1 bytes without cutting a UTF-8 character, into buf. */
void plot_copy_utf8(char *buf, size_t n, const char *s);

#endif
