/* libFuzzer: token files (raw uint16, llm.c-style with a header, or SFT token files with their
 * examples and target flags), opened with options taken from the first bytes, then a few batches
 * (packed or one example a window for SFT files), the state round trip and the whole-file id
 * check. */
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "runtime/io/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    const char *p = fuzz_write("tok.bin", data + 4, size - 4);
    if (!p) return 0;
    fr_data_opts o = fr_data_opts_default();
    o.batch = 1 + data[0] % 4;
    o.seq_len = 1 + data[1] % 16;
    o.order = (data[2] & 1) ? FR_DATA_RANDOM : FR_DATA_SEQUENTIAL;
    o.vocab_size = (data[2] & 2) ? 1 + data[3] * 64 : 0;
    o.token_dtype = (data[2] & 4) ? FR_U8 : (data[2] & 8) ? FR_U32 : FR_UNDEFINED;
    o.packing = (data[2] & 16) ? 0 : 1; /* SFT files: one example a window, or packed */
    fr_data_loader *dl;
    if (fr_data_open(p, &o, &dl) != FR_OK) return 0;
    int64_t w[4 * 17];
    if (fr_data_is_sft(dl)) {
        int32_t seg[4 * 17];
        uint8_t tgt[4 * 17];
        int64_t n = 0;
        for (int k = 0; k < 3; k++)
            if (fr_data_next_sft(dl, w, seg, tgt, &n) != FR_OK) break;
    } else {
        for (int k = 0; k < 3; k++)
            if (fr_data_next(dl, FR_I64, w) != FR_OK) break;
    }
    uint8_t st[FR_DATA_STATE_BYTES];
    fr_data_get_state(dl, st);
    fr_ignore_status(fr_data_set_state(dl, st, sizeof st)); /* the fuzzer wants no crash, not a verdict */
    fr_ignore_status(fr_data_check_tokens(dl, 1 + data[3]));
    fr_data_close(dl);
    return 0;
}
