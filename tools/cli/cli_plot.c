/* fp8run plot: training logs (--log JSONL, with --log-fp8 records) drawn as one SVG page of
 * charts, several runs overlaid. Reading the records is plot_log.c, the charts plot_panel.c,
 * the SVG writer svg.c; here: the command line, the files and the page's layout. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plot_log.h"

/* a log is read whole: more than this is no training log */
#define MAX_LOG_BYTES ((uint64_t)4 << 30)

void cli_plot_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run plot RUN.jsonl [MORE.jsonl ...] -o OUT.svg [--title TEXT]\n"
            "\n"
            "Draws training logs (fp8run train --log FILE.jsonl) as an SVG page: train and\n"
            "validation loss, learning rate, tokens/s, gradient norm, skipped steps (red\n"
            "marks), and with --log-fp8 records each FP8 Linear's amax and range use\n"
            "(amax * scale / fp8 max; above 1 saturates) for its x, w and dy operands.\n"
            "Several logs are overlaid, one color (or dash) per run. The page replaces OUT.svg\n"
            "only once it is written whole; OUT.svg may not be one of the logs.\n"
            "\n"
            "options:\n"
            "  -o OUT.svg              the file to write (required)\n"
            "  --title TEXT            the page title (default: the log names)\n"
            "  -h, --help              show this help\n");
}

static int read_log(plot_page *pg, int run, const char *path)
{
    char label[128], err[600], *data;
    size_t len;
    if (fp8run_file_read(path, "training log", MAX_LOG_BYTES, &data, &len) != FP8RUN_OK) return cli_fail_status();
    plot_run_label(path, label, sizeof label);
    int rc = plot_page_read(pg, run, label, data, len, path, err, sizeof err) ? cli_fail("%s", err) : 0;
    fp8run_file_free(data);
    return rc;
}

/* The page as SVG text into *text (malloc'ed). */
static int render(plot_page *pg, const char *title, char **text, size_t *len)
{
    const double W = 620, H = 290, TOP = 44;
    int order[PLOT_N_PANELS], n = 0;
    /* amax and range use of an operand side by side */
    static const int layout[] = {P_LOSS, P_LR, P_TPS, P_GNORM, P_FP8, P_FP8 + 3, P_FP8 + 1, P_FP8 + 4, P_FP8 + 2,
                                 P_FP8 + 5};
    for (int i = 0; i < PLOT_N_PANELS; i++)
        if (plot_panel_has_data(&pg->p[layout[i]])) order[n++] = layout[i];
    FILE *f = open_memstream(text, len);
    if (!f) return cli_fail("out of memory");
    svg g;
    svg_begin(&g, f, 2 * W, TOP + H * ((n + 1) / 2) + 10);
    svg_text(&g, 20, 28, 17, "start", "#111111", 0, title);
    if (pg->dropped) { /* said on the page, not only on stderr: the chart is missing them */
        char note[160];
        snprintf(note, sizeof note, "%lld points dropped: a step beyond %.0e or a value beyond %.0e", pg->dropped,
                 PLOT_MAX_STEP, PLOT_MAX_VALUE);
        svg_text(&g, 2 * W - 20, 28, 11, "end", "#cc0000", 0, note);
    }
    for (int i = 0; i < n; i++)
        plot_panel_draw(&pg->p[order[i]], &g, (i % 2) * W, TOP + (i / 2) * H, W, H, pg->xlo, pg->xhi);
    svg_end(&g);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        free(*text);
        *text = NULL;
        return cli_fail("out of memory for the page");
    }
    return 0;
}

/* The write rule's refusals before any work: -o is none of the logs (by any name). */
static int check_files(const char **logs, int n_logs, const char *out)
{
    fp8run_files *f;
    if (fp8run_files_create(&f) != FP8RUN_OK) return cli_fail_status();
    fp8run_status ps = FP8RUN_OK;
    for (int i = 0; i < n_logs && ps == FP8RUN_OK; i++) ps = fp8run_files_input(f, logs[i], "training log");
    if (ps == FP8RUN_OK) ps = fp8run_files_output(f, out, "SVG page");
    fp8run_files_destroy(f);
    return ps == FP8RUN_OK ? 0 : cli_fail_status();
}

int cli_plot(int argc, char **argv)
{
    const char *out = NULL, *title = NULL;
    const char **logs = calloc((size_t)argc, sizeof *logs);
    int n_logs = 0, rc = 0;
    if (!logs) return cli_fail("out of memory");
    for (int i = 1; i < argc && rc == 0; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            cli_plot_help(stdout);
            free(logs);
            return 0;
        }
        if ((r = cli_option(argc, argv, &i, "plot", "-o", &out)) ||
            (r = cli_option(argc, argv, &i, "plot", "--title", &title))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = cli_usage("plot", "unknown option '%s'", argv[i]);
        } else {
            logs[n_logs++] = argv[i];
        }
    }
    if (rc == 0 && n_logs == 0) rc = cli_usage("plot", "give at least one log (fp8run train --log FILE.jsonl)");
    if (rc == 0 && !out) rc = cli_usage("plot", "-o OUT.svg is required");
    if (rc == 0) rc = check_files(logs, n_logs, out);
    plot_page pg;
    plot_page_init(&pg, n_logs);
    for (int i = 0; i < n_logs && rc == 0; i++) rc = read_log(&pg, i, logs[i]);
    char *text = NULL;
    size_t len = 0;
    if (rc == 0) {
        char deftitle[512] = "fp8run:";
        for (int i = 0; i < n_logs; i++) {
            char l[128];
            plot_run_label(logs[i], l, sizeof l);
            size_t used = strlen(deftitle);
            if (used + strlen(l) + 3 >= sizeof deftitle) break; /* the rest would be cut anywhere */
            snprintf(deftitle + used, sizeof deftitle - used, "%s %s", i ? "," : "", l);
        }
        rc = render(&pg, title ? title : deftitle, &text, &len);
    }
    const void *parts[1] = {text};
    if (rc == 0 && fp8run_file_write(out, parts, &len, 1) != FP8RUN_OK) rc = cli_fail_status();
    if (rc == 0) printf("wrote %s\n", out);
    if (rc == 0 && pg.dropped)
        fprintf(stderr, "fp8run: warning: %lld points with a step beyond %.0e or a value beyond %.0e were dropped\n",
                pg.dropped, PLOT_MAX_STEP, PLOT_MAX_VALUE);
    free(text);
    plot_page_free(&pg);
    free(logs);
    return rc;
}
