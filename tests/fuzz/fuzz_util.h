/* Shared by the libFuzzer targets (tools/fuzz.sh builds them with -DFP8RUN_FUZZ=ON): readers
 * that take a path get the input through a file in a per-process temporary folder. */
#ifndef FR_FUZZ_UTIL_H
#define FR_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* libFuzzer's optional start-up hook (defined once, in fuzz_util.c): fixes Jansson's hash seed. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* The per-process folder: $FP8RUN_FUZZ_DIR when set, else a new one under $TMPDIR or /tmp
 * (created on first use; NULL when it cannot be). */
const char *fuzz_dir(void);
/* Write data to fuzz_dir()/name (replacing it); returns the path (static) or NULL. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);

#endif
