/* libFuzzer: the .jsonl document reader of `fp8run prepare` (tools/cli/prepare_jsonl.c) on
 * arbitrary bytes: every record's "text" handed over with its length, or one message naming
 * the line. Each document must be valid UTF-8 (the reader checks lines before parsing) and
 * the message must name the file (a finding aborts). */
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
/* the CLI's reader, compiled into this target from tools/cli/ (CMakeLists.txt), its header found
   through that folder: tests/ do not include tools/ otherwise */
#include <prepare_jsonl.h>

static int utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

static int doc(void *user, const char *text, size_t n)
{
    size_t *total = user;
    if (!utf8((const unsigned char *)text, n)) abort();
    *total += n + 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[600] = "";
    size_t total = 0;
    if (prepare_jsonl_docs((const char *)data, size, "fuzz.jsonl", doc, &total, err, sizeof err) != 0 &&
        strncmp(err, "fuzz.jsonl", 10) != 0)
        abort();
    return 0;
}
