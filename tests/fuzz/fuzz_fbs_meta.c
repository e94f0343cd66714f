/* libFuzzer: the fp8run.* metadata of a compiled graph (.fbs), fuzzed as text with the graph
 * held fixed. The input is lines "KEY=VALUE" (VALUE may be empty) that replace or add metadata
 * entries of a real compiled graph (the fbs seed llama_min_fp8.fbs, loaded once), and "-KEY"
 * that removes one; then the recorded options go through the option table (as the API's load
 * does) and the whole decode runs: the layer table against the graph, scaling state, fused parameters, ties and the embedded
 * original model. fuzz_fbs mutates the protobuf bytes, which mostly exercises the ONNX
 * decoder; this target reaches the metadata readers with well-formed files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "runtime/api/api_internal.h"
#include "runtime/io/fbs.h"
#include "tests/fuzz/fuzz_util.h"

#ifndef FR_FUZZ_BASE_FBS
#error "FR_FUZZ_BASE_FBS: the compiled graph the metadata is fuzzed on (CMakeLists.txt sets it)"
#endif

#define MAX_ENTRIES 4096

static fr_graph *base;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base && fr_onnx_load_file(FR_FUZZ_BASE_FBS, &base) != FR_OK) abort(); /* a broken seed: say so */
    if (size > 65536) return 0;
    char *text = malloc(size + 1);
    fr_kv *kv = malloc((size_t)(base->n_metadata + MAX_ENTRIES) * sizeof *kv);
    if (!text || !kv) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    int n = base->n_metadata;
    memcpy(kv, base->metadata, (size_t)n * sizeof *kv);
    /* the edits: each line one entry (pointers into text; the base's strings are never freed) */
    for (char *line = text, *next; line && *line && n < base->n_metadata + MAX_ENTRIES; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        int del = line[0] == '-';
        char *key = line + del, *eq = strchr(key, '=');
        if (eq) *eq = '\0';
        if (!del && !eq) continue;
        int at = -1;
        for (int i = 0; i < n && at < 0; i++)
            if (strcmp(kv[i].key, key) == 0) at = i;
        if (del) {
            if (at >= 0) kv[at] = kv[--n];
        } else if (at >= 0) {
            kv[at].value = eq + 1;
        } else {
            kv[n].key = key;
            kv[n++].value = eq + 1;
        }
    }
    fr_kv *saved = base->metadata;
    int saved_n = base->n_metadata;
    base->metadata = kv;
    base->n_metadata = n;
    fr_fbs f;
    fr_ignore_status(fr_api_check_recorded_options(base, "fuzz.fbs")); /* the API's check on load */
    if (fr_fbs_decode(base, "fuzz.fbs", &f) == FR_OK) fr_fbs_free(&f);
    int64_t b, s;
    fr_ignore_status(fr_fbs_shape(base, &b, &s)); /* refused or not: only no crash counts */
    base->metadata = saved;
    base->n_metadata = saved_n;
    free(kv);
    free(text);
    return 0;
}
