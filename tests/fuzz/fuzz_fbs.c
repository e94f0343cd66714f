/* libFuzzer: a compiled graph (.fbs) from memory: ONNX import, then the fp8run.* metadata
 * decode (layer table, scaling state, embedded original model), the fused table and the
 * original model rebuilt from it. */
#include <stdint.h>
#include <stdlib.h>

#include "graph/onnx_io.h"
#include "runtime/io/fbs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fr_graph *g = NULL;
    if (fr_onnx_load_buffer(data, size, NULL, "fuzz.fbs", &g) != FR_OK) return 0;
    fr_fbs f;
    if (fr_fbs_decode(g, "fuzz.fbs", &f) == FR_OK) fr_fbs_free(&f);
    fr_fp8_fused *fused = NULL;
    int n = 0;
    if (fr_fbs_fused_table(g, &fused, &n) == FR_OK) fr_fbs_fused_free(fused, n);
    fr_graph *orig = NULL;
    if (fr_fbs_original(g, &orig) == FR_OK) fr_graph_free(orig);
    int64_t b, s;
    fr_ignore_status(fr_fbs_shape(g, &b, &s)); /* refused or not: only no crash counts */
    fr_graph_free(g);
    return 0;
}
