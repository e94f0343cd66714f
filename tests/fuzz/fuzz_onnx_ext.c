/* libFuzzer: ONNX import from a file whose folder holds external data (w.bin, 64 bytes, and
 * a subfolder), so locations, offsets and lengths are all reachable. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_util.h"
#include "graph/onnx_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        uint8_t w[64];
        for (int i = 0; i < 64; i++) w[i] = (uint8_t)(i * 37);
        char sub[300];
        if (!fuzz_write("w.bin", w, sizeof w) || !fuzz_dir()) return 0;
        snprintf(sub, sizeof sub, "%s/sub", fuzz_dir());
        mkdir(sub, 0755);
        if (!fuzz_write("sub/v.bin", w, 16)) return 0;
        ready = 1;
    }
    const char *p = fuzz_write("model.onnx", data, size);
    fr_graph *g = NULL;
    if (p && fr_onnx_load_file(p, &g) == FR_OK) fr_graph_free(g);
    return 0;
}
