/* libFuzzer: ONNX import from memory (no folder: external data refused), then the checks a
 * loaded model goes through before use (toposort ran in the import). */
#include <stddef.h>
#include <stdint.h>

#include "graph/onnx_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fr_graph *g = NULL;
    if (fr_onnx_load_buffer(data, size, NULL, "fuzz.onnx", &g) == FR_OK) fr_graph_free(g);
    return 0;
}
