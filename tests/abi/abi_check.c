/* Compiled against the INSTALLED header and libraries only (tests/abi/run_abi_check.sh:
 * `cc abi_check.c $(pkg-config --cflags --libs fp8run)`, and once more statically), so it
 * proves that <fp8run.h> stands alone, that pkg-config finds everything and that the shared
 * library exports what the header declares.
 *   abi_check MODEL.onnx TOKENS.bin OUTDIR
 * Prints "abi_check: ok" and exits 0 when everything works. */
#include <fp8run.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "abi_check: line %d: %s failed (%s)\n", __LINE__, #cond, fp8run_last_error()); \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: abi_check MODEL.onnx TOKENS.bin OUTDIR\n");
        return 2;
    }
    CHECK(fp8run_abi_version() == FP8RUN_ABI_VERSION);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FP8RUN_VERSION_MAJOR, FP8RUN_VERSION_MINOR, FP8RUN_VERSION_PATCH);
    CHECK(strcmp(fp8run_version(), want) == 0);

    fp8run_model *m = NULL;
    CHECK(fp8run_model_load("/nonexistent/model.onnx", &m) == FP8RUN_ERR_IO);
    CHECK(strstr(fp8run_last_error(), "/nonexistent/model.onnx") != NULL);
    CHECK(fp8run_model_load(argv[1], &m) == FP8RUN_OK);
    if (!m) return 1;
    fp8run_value_info in = {.struct_size = sizeof in};
    CHECK(fp8run_model_input(m, 0, &in) == FP8RUN_OK);
    CHECK(in.rank == 2 && in.dim_names[0] != NULL);

    fp8run_train_config cfg;
    CHECK(fp8run_train_config_init(&cfg, sizeof cfg) == FP8RUN_OK);
    cfg.batch = 2;
    cfg.seq_len = 8;
    cfg.precision = "bf16";
    fp8run_report *r = NULL;
    CHECK(fp8run_model_compile(m, &cfg, &r) == FP8RUN_OK);
    CHECK(fp8run_report_layer_count(r) > 0);
    fp8run_report_destroy(r);

    fp8run_session *s = NULL;
    CHECK(fp8run_session_create(m, "cuda", &cfg, &s) == FP8RUN_ERR_UNAVAILABLE);
    CHECK(fp8run_session_create(m, "cpu", &cfg, &s) == FP8RUN_OK);
    fp8run_data_config dc;
    CHECK(fp8run_data_config_init(&dc, sizeof dc) == FP8RUN_OK);
    dc.batch = 2;
    dc.seq_len = 8;
    dc.vocab_size = fp8run_session_vocab(s);
    fp8run_data_loader *d = NULL;
    CHECK(fp8run_data_open(argv[2], &dc, &d) == FP8RUN_OK);
    int32_t w[2 * 9];
    for (int i = 0; i < 2 && s && d; i++) {
        fp8run_step_stats st = {.struct_size = sizeof st};
        CHECK(fp8run_data_next(d, FP8RUN_DTYPE_INT32, w, 18) == FP8RUN_OK);
        CHECK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT32, 18, &st) == FP8RUN_OK);
        CHECK(isfinite(st.loss) && st.step == i);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/abi.ckpt", argv[3]);
    CHECK(fp8run_session_save(s, path, d) == FP8RUN_OK);
    fp8run_checkpoint *c = NULL;
    CHECK(fp8run_checkpoint_open(path, &c) == FP8RUN_OK);
    CHECK(fp8run_checkpoint_step(c) == 2 && fp8run_checkpoint_has_data_state(c));
    fp8run_checkpoint_close(c);
    snprintf(path, sizeof path, "%s/abi.onnx", argv[3]);
    CHECK(fp8run_session_export(s, path) == FP8RUN_OK);
    fp8run_data_close(d);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
    if (failures) return 1;
    printf("abi_check: ok (fp8run %s, ABI %d)\n", fp8run_version(), fp8run_abi_version());
    return 0;
}
