/* Public API: the read and write rules of graph/safe_io.h, for the CLI and host programs. */
#include <stdlib.h>

#include "graph/safe_io.h"
#include "runtime/api/api_internal.h"

struct fp8run_files {
    fr_file_set set;
};

FP8RUN_API fp8run_status fp8run_files_create(fp8run_files **out)
{
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", __func__);
    *out = calloc(1, sizeof **out);
    if (!*out) return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", __func__);
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_files_destroy(fp8run_files *f)
{
    if (!f) return;
    fr_file_set_free(&f->set);
    free(f);
}

static fp8run_status declare(const char *fn, fp8run_files *f, const char *path, const char *what, int output)
{
    if (!f || !path) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: files or path is NULL", fn);
    if (!what || !what[0]) what = "file";
    fr_status st = output ? fr_file_set_output(&f->set, path, what) : fr_file_set_input(&f->set, path, what);
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, fn, st);
}

FP8RUN_API fp8run_status fp8run_files_input(fp8run_files *f, const char *path, const char *what)
{
    return declare(__func__, f, path, what, 0);
}

FP8RUN_API fp8run_status fp8run_files_output(fp8run_files *f, const char *path, const char *what)
{
    return declare(__func__, f, path, what, 1);
}

FP8RUN_API fp8run_status fp8run_file_read(const char *path, const char *what, uint64_t max_bytes, char **data,
                                          size_t *len)
{
    if (!path || !path[0] || !data || !len)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: path, data or len is NULL or empty", __func__);
    fr_status st = fr_read_regular(path, what && what[0] ? what : "file", 0, max_bytes, data, len);
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, __func__, st);
}

FP8RUN_API void fp8run_file_free(void *data)
{
    free(data);
}

FP8RUN_API fp8run_status fp8run_file_write(const char *path, const void *const *parts, const size_t *sizes, int n_parts)
{
    const char *fn = __func__;
    if (!path || !path[0] || n_parts < 0 || (n_parts > 0 && (!parts || !sizes)))
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path, or parts/sizes NULL", fn);
    for (int i = 0; i < n_parts; i++)
        if (sizes[i] && !parts[i])
            return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: part %d of '%s' is NULL", fn, i, path);
    fr_atomic_file af;
    fr_status st = fr_atomic_open(path, &af);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    for (int i = 0; i < n_parts && st == FR_OK; i++)
        if (sizes[i]) st = fr_atomic_write(&af, parts[i], sizes[i]);
    if (st == FR_OK) st = fr_atomic_finish(&af);
    if (st == FR_OK) st = fr_atomic_commit(&af);
    else fr_atomic_abort(&af);
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, fn, st);
}

struct fp8run_file_writer {
    fr_atomic_file af;
    int finished, failed;
};

FP8RUN_API fp8run_status fp8run_file_writer_open(const char *path, fp8run_file_writer **out)
{
    if (!out || !path || !path[0])
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path, or out is NULL", __func__);
    *out = NULL;
    fp8run_file_writer *w = calloc(1, sizeof *w);
    if (!w) return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", __func__);
    fr_status st = fr_atomic_open(path, &w->af);
    if (st != FR_OK) {
        free(w);
        return fr_api_fail(NULL, __func__, st);
    }
    *out = w;
    return FP8RUN_OK;
}

/* a writer that failed or finished takes no more writes */
static fp8run_status usable(const char *fn, fp8run_file_writer *w)
{
    if (!w) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: writer is NULL", fn);
    if (w->failed || w->finished)
        return fr_api_error(NULL, FP8RUN_ERR_STATE, "%s: the writer of '%s' %s", fn, w->af.path,
                            w->failed ? "failed before: abort it" : "is finished");
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_file_writer_write(fp8run_file_writer *w, const void *data, size_t n)
{
    fp8run_status ps = usable(__func__, w);
    if (ps != FP8RUN_OK) return ps;
    if (n && !data) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data is NULL", __func__);
    fr_status st = n ? fr_atomic_write(&w->af, data, n) : FR_OK;
    w->failed = st != FR_OK;
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, __func__, st);
}

FP8RUN_API fp8run_status fp8run_file_writer_finish(fp8run_file_writer *w)
{
    fp8run_status ps = usable(__func__, w);
    if (ps != FP8RUN_OK) return ps;
    fr_status st = fr_atomic_finish(&w->af);
    w->failed = st != FR_OK;
    w->finished = st == FR_OK;
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, __func__, st);
}

FP8RUN_API fp8run_status fp8run_file_writer_commit(fp8run_file_writer *w)
{
    if (!w) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: writer is NULL", __func__);
    if (!w->finished) {
        fp8run_status ps = fp8run_file_writer_finish(w);
        if (ps != FP8RUN_OK) {
            fp8run_file_writer_abort(w);
            return ps;
        }
    }
    fr_status st = fr_atomic_commit(&w->af); /* removes the temporary file when it fails */
    free(w);
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, __func__, st);
}

FP8RUN_API void fp8run_file_writer_abort(fp8run_file_writer *w)
{
    if (!w) return;
    fr_atomic_abort(&w->af);
    free(w);
}
