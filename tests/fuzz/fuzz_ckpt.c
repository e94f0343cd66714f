/* libFuzzer: checkpoint files (CRC checked: the fuzzer mostly exercises the refusal paths; the
 * FUZZ_CKPT_FIX_CRC variant of tools/fuzz.sh patches a valid CRC in so the metadata decode,
 * the tensor bounds and the entries are reached), then what inspecting one reads. */
#include <fp8run.h>
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/crc32c.h"

/* Rewrite the trailer's CRC (the last 32 bytes: moff, mlen, crc, 0, "FP8R-END") to match. */
static void fix_crc(uint8_t *d, size_t n)
{
    if (n < 48) return;
    uint8_t *tr = d + n - 32;
    uint32_t crc = fr_crc32c(fr_crc32c(0, d, n - 32), tr, 16);
    for (int i = 0; i < 4; i++) tr[16 + i] = (uint8_t)(crc >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buf[1 << 20];
    if (size > sizeof buf) return 0;
    memcpy(buf, data, size);
    if (size && (data[0] & 1)) fix_crc(buf, size); /* half the inputs get a valid CRC */
    const char *p = fuzz_write("x.ckpt", buf, size);
    if (!p) return 0;
    fr_ckpt *c;
    if (fr_ckpt_open(p, &c) == FR_OK) {
        for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
            const fr_ckpt_tensor *t = fr_ckpt_tensor_at(c, i);
            volatile uint8_t sink = 0;
            for (size_t k = 0; k < t->nbytes; k += 4096) sink ^= ((const uint8_t *)t->data)[k];
            (void)sink;
            (void)fr_ckpt_find(c, t->name, t->kind);
        }
        const void *v;
        size_t len;
        fr_ignore_status(fr_ckpt_entry(c, "config", &v, &len)); /* only: no crash, no leak */
        fr_ckpt_close(c);
    }
    fp8run_checkpoint *ck = NULL;
    if (fp8run_checkpoint_open(p, &ck) == FP8RUN_OK) {
        (void)fp8run_checkpoint_model_path(ck);
        for (int i = 0; i < fp8run_checkpoint_param_count(ck); i++) {
            fp8run_value_info vi = {.struct_size = sizeof vi};
            if (fp8run_checkpoint_param(ck, i, &vi) != FP8RUN_OK) continue; /* no crash is the test */
        }
        fp8run_checkpoint_close(ck);
    }
    return 0;
}
