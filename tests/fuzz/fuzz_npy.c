/* libFuzzer: .npy from memory and from a file (the two readers share the header parser but
 * not the size checks). */
#include <stdint.h>

#include "tests/fuzz/fuzz_util.h"
#include "runtime/io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fr_tensor *t = NULL;
    if (fr_npy_load_buffer(data, size, "fuzz.npy", &t) == FR_OK) fr_tensor_free(t);
    const char *p = fuzz_write("x.npy", data, size);
    t = NULL;
    if (p && fr_npy_load(p, &t) == FR_OK) fr_tensor_free(t);
    return 0;
}
