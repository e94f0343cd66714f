/* SFT token files (runtime/io/sft_data.h): the byte-level writer (prompt/completion and chat
 * lines, bad lines, long examples, the split), the reader's checks on damaged files, and the
 * windows with packing on and off: tokens, segment ids, target flags, labels and positions. */
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "runtime/io/sft_data.h"

static char dir[512];

static int setup(void)
{
    fr_test_tmpdir(dir, sizeof dir);
    return dir[0] ? 0 : 1;
}

static const char *path_of(const char *name)
{
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_text(const char *name, const char *text)
{
    FILE *f = fopen(path_of(name), "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static unsigned char *slurp(const char *name, size_t *len)
{
    FILE *f = fopen(path_of(name), "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    if (b && fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static fr_status prepare(const char *in, const char *out, int64_t max_tokens, int drop, int skip, fr_sft_summary *s)
{
    const char *files[1] = {path_of(in)};
    fr_sft_prepare p = {.files = files, .n_files = 1, .out = path_of(out), .max_tokens = max_tokens,
                        .drop_long = drop, .skip_bad_lines = skip};
    return fr_sft_prepare_bytes(&p, s);
}

/* Example i's bytes and targets as strings ('1'/'0'). */
static void example_str(const fr_sft_view *v, int64_t i, char *toks, char *tgts)
{
    int64_t s, e;
    fr_sft_example(v, i, &s, &e);
    for (int64_t j = s; j < e; j++) {
        toks[j - s] = (char)v->tokens[2 * j];
        tgts[j - s] = (char)('0' + v->targets[j]);
    }
    toks[e - s] = tgts[e - s] = 0;
}

static void test_bytes_writer(void)
{
    write_text("d.jsonl", "{\"prompt\": \"Q: hi\\n\", \"completion\": \"A: yo\"}\n"
                          "\n"
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
                          "\"content\": \"ok\"}]}\n");
    fr_sft_summary s;
    FR_ASSERT_OK(prepare("d.jsonl", "d.bin", 0, 0, 0, &s));
    CU_ASSERT_EQUAL(s.examples, 2);
    CU_ASSERT_EQUAL(s.tokens, 12 + 23);
    CU_ASSERT_EQUAL(s.target_tokens, 6 + 4);
    size_t len;
    unsigned char *b = slurp("d.bin", &len);
    fr_sft_view v;
    FR_ASSERT_OK(fr_sft_parse(b, len, "d.bin", &v));
    CU_ASSERT_EQUAL(v.examples, 2);
    CU_ASSERT_EQUAL(v.vocab, 256);
    CU_ASSERT_EQUAL(v.eos, 0);
    char t[64], g[64];
    example_str(&v, 0, t, g);
    CU_ASSERT_EQUAL(memcmp(t, "Q: hi\nA: yo", 11), 0); /* then EOS 0 */
    CU_ASSERT_STRING_EQUAL(g, "000000111111");
    example_str(&v, 1, t, g);
    CU_ASSERT_STRING_EQUAL(t, "user: x\nassistant: ok\n");
    CU_ASSERT_STRING_EQUAL(g, "0000000000000000000" "1111"); /* "ok\n" and EOS */
    free(b);
}

static void test_bad_lines_and_long(void)
{
    write_text("b.jsonl", "{\"prompt\": \"ab\", \"completion\": \"cd\"}\n"
                          "{oops\n"
                          "{\"prompt\": \"abcdef\", \"completion\": \"ghij\"}\n"
                          "{\"messages\": [{\"role\": \"user\"}]}\n"
                          "{\"prompt\": \"abcdefghijkl\", \"completion\": \"m\"}\n");
    fr_sft_summary s;
    CU_ASSERT_EQUAL(prepare("b.jsonl", "b.bin", 0, 0, 0, &s), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "b.jsonl:2: not JSON"));
    fr_clear_error();
    /* 8 tokens at most: "abcdefghij"+EOS is cut to 8 (its targets "gh" stay); the last one is
     * cut too, has no target left and is dropped as such (counted in both) */
    FR_ASSERT_OK(prepare("b.jsonl", "b.bin", 8, 0, 1, &s));
    CU_ASSERT_EQUAL(s.bad_lines, 2);
    CU_ASSERT_EQUAL(s.truncated, 2);
    CU_ASSERT_EQUAL(s.no_target, 1);
    CU_ASSERT_EQUAL(s.examples, 2);
    CU_ASSERT_EQUAL(s.tokens, 5 + 8);
    FR_ASSERT_OK(prepare("b.jsonl", "b.bin", 8, 1, 1, &s));
    CU_ASSERT_EQUAL(s.dropped, 2);
    CU_ASSERT_EQUAL(s.examples, 1);
}

static void test_damaged_files(void)
{
    write_text("g.jsonl", "{\"prompt\": \"ab\", \"completion\": \"cd\"}\n{\"prompt\": \"e\", \"completion\": \"f\"}\n");
    fr_sft_summary s;
    FR_ASSERT_OK(prepare("g.jsonl", "g.bin", 0, 0, 0, &s));
    size_t len;
    unsigned char *b = slurp("g.bin", &len);
    fr_sft_view v;
    FR_ASSERT_OK(fr_sft_parse(b, len, "g.bin", &v));
    CU_ASSERT_EQUAL(fr_sft_parse(b, len - 1, "g.bin", &v), FR_ERR_PARSE); /* size */
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "g.bin"));
    b[64 + 8] = 9; /* offset[1] past the tokens */
    CU_ASSERT_EQUAL(fr_sft_parse(b, len, "g.bin", &v), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "offset"));
    b[64 + 8] = 5;
    FR_ASSERT_OK(fr_sft_parse(b, len, "g.bin", &v));
    b[len - 1] = 2; /* a flag that is not 0/1 */
    CU_ASSERT_EQUAL(fr_sft_parse(b, len, "g.bin", &v), FR_ERR_PARSE);
    b[len - 1] = 0; /* a flag cleared: the header's count disagrees */
    CU_ASSERT_EQUAL(fr_sft_parse(b, len, "g.bin", &v), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "targets"));
    b[8] = 2; /* version */
    CU_ASSERT_EQUAL(fr_sft_parse(b, len, "g.bin", &v), FR_ERR_UNSUPPORTED);
    b[0] = 'X';
    CU_ASSERT_EQUAL(fr_sft_parse(b, len, "g.bin", &v), FR_ERR_PARSE);
    CU_ASSERT_FALSE(fr_sft_is_sft(b, len));
    fr_clear_error();
    free(b);
}

/* Examples of 3, 4, 6 and 9 tokens in windows of T + 1 = 8. */
static void test_windows(void)
{
    write_text("w.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                          "{\"prompt\": \"cd\", \"completion\": \"e\"}\n"
                          "{\"prompt\": \"fgh\", \"completion\": \"ij\"}\n"
                          "{\"prompt\": \"klmn\", \"completion\": \"opqr\"}\n");
    fr_sft_summary s;
    FR_ASSERT_OK(prepare("w.jsonl", "w.bin", 0, 0, 0, &s));
    size_t len;
    unsigned char *b = slurp("w.bin", &len);
    fr_sft_view v;
    FR_ASSERT_OK(fr_sft_parse(b, len, "w.bin", &v));
    const int64_t T = 7;
    fr_sft_plan p;
    FR_ASSERT_OK(fr_sft_plan_windows(&v, T, 1, &p));
    /* packed: [3 4] [6] [9 -> 8] */
    CU_ASSERT_EQUAL(p.windows, 3);
    CU_ASSERT_EQUAL(p.truncated, 1);
    CU_ASSERT_EQUAL(p.slots_used, 3 + 4 + 6 + 8);
    int64_t tok[8], lab[7], pos[7];
    int32_t seg[8];
    uint8_t tgt[8];
    fr_sft_window(&v, &p, 0, T, tok, seg, tgt);
    const int64_t want_tok[8] = {'a', 'b', 0, 'c', 'd', 'e', 0, 0};
    const int32_t want_seg[8] = {1, 1, 1, 2, 2, 2, 2, 0};
    const uint8_t want_tgt[8] = {0, 1, 1, 0, 0, 1, 1, 0};
    CU_ASSERT_EQUAL(memcmp(tok, want_tok, sizeof tok), 0);
    CU_ASSERT_EQUAL(memcmp(seg, want_seg, sizeof seg), 0);
    CU_ASSERT_EQUAL(memcmp(tgt, want_tgt, sizeof tgt), 0);
    CU_ASSERT_EQUAL(fr_sft_labels(tok, seg, tgt, T, -100, lab), 4);
    const int64_t want_lab[7] = {'b', 0, -100, -100, 'e', 0, -100};
    CU_ASSERT_EQUAL(memcmp(lab, want_lab, sizeof lab), 0);
    fr_sft_positions(seg, T, pos);
    const int64_t want_pos[7] = {0, 1, 2, 0, 1, 2, 3};
    CU_ASSERT_EQUAL(memcmp(pos, want_pos, sizeof pos), 0);
    fr_sft_window(&v, &p, 2, T, tok, seg, tgt); /* cut: "klmnopqr" + EOS -> "klmnopqr" */
    CU_ASSERT_EQUAL(tok[7], 'r');
    CU_ASSERT_EQUAL(seg[7], 1);
    CU_ASSERT_EQUAL(fr_sft_labels(tok, seg, tgt, T, -100, lab), 4);
    fr_sft_plan_free(&p);

    FR_ASSERT_OK(fr_sft_plan_windows(&v, T, 0, &p)); /* one per window */
    CU_ASSERT_EQUAL(p.windows, 4);
    fr_sft_window(&v, &p, 1, T, tok, seg, tgt);
    const int32_t want_seg1[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    CU_ASSERT_EQUAL(memcmp(seg, want_seg1, sizeof seg), 0);
    CU_ASSERT_EQUAL(tok[4], 0); /* padding is EOS */
    CU_ASSERT_EQUAL(fr_sft_labels(tok, seg, tgt, T, -100, lab), 2);
    CU_ASSERT_EQUAL(p.target_labels, 2 + 2 + 3 + 4);
    fr_sft_plan_free(&p);
    free(b);
}

/* First fit over the open windows: examples may go back to an earlier window with room. */
static void test_first_fit(void)
{
    int64_t win[70];
    CU_ASSERT_EQUAL(fr_sft_pack((int64_t[]){6, 6, 4, 4}, 4, 10, win), 2);
    CU_ASSERT(win[0] == 0 && win[1] == 1 && win[2] == 0 && win[3] == 1);
    /* only the last FR_SFT_OPEN_WINDOWS windows take examples */
    int64_t len[66];
    len[0] = 9;
    for (int i = 1; i < 65; i++) len[i] = 10;
    len[65] = 1;
    CU_ASSERT_EQUAL(fr_sft_pack(len, 66, 10, win), 66);
    CU_ASSERT_EQUAL(win[65], 65);
    len[64] = 1; /* with fewer windows opened, the last one fits the first window's room */
    CU_ASSERT_EQUAL(fr_sft_pack(len, 65, 10, win), 64);
    CU_ASSERT_EQUAL(win[64], 0);
    /* at most FR_SFT_MAX_EXAMPLES examples a window, however short they are */
    int64_t one[200], w200[200];
    for (int i = 0; i < 200; i++) one[i] = 1;
    CU_ASSERT_EQUAL(fr_sft_pack(one, 200, 2049, w200), (200 + FR_SFT_MAX_EXAMPLES - 1) / FR_SFT_MAX_EXAMPLES);
    CU_ASSERT_EQUAL(w200[FR_SFT_MAX_EXAMPLES - 1], 0);
    CU_ASSERT_EQUAL(w200[FR_SFT_MAX_EXAMPLES], 1);
    /* a file: examples of 6, 6, 4, 4 tokens in windows of 10 come as [0 2] [1 3] */
    write_text("f.jsonl", "{\"prompt\": \"abc\", \"completion\": \"de\"}\n{\"prompt\": \"fgh\", \"completion\": \"ij\"}\n"
                          "{\"prompt\": \"k\", \"completion\": \"lm\"}\n{\"prompt\": \"n\", \"completion\": \"op\"}\n");
    fr_sft_summary s;
    FR_ASSERT_OK(prepare("f.jsonl", "f.bin", 10, 0, 0, &s));
    CU_ASSERT_EQUAL(s.windows_packed, 2);
    size_t flen;
    unsigned char *b = slurp("f.bin", &flen);
    fr_sft_view v;
    FR_ASSERT_OK(fr_sft_parse(b, flen, "f.bin", &v));
    fr_sft_plan p;
    FR_ASSERT_OK(fr_sft_plan_windows(&v, 9, 1, &p));
    int64_t tok[10];
    int32_t seg[10];
    fr_sft_window(&v, &p, 0, 9, tok, seg, NULL);
    const int64_t want[10] = {'a', 'b', 'c', 'd', 'e', 0, 'k', 'l', 'm', 0};
    CU_ASSERT_EQUAL(memcmp(tok, want, sizeof want), 0);
    CU_ASSERT(seg[5] == 1 && seg[6] == 2 && seg[9] == 2);
    fr_sft_plan_free(&p);
    free(b);
}

static CU_TestInfo tests[] = {
    {"byte-level writer", test_bytes_writer},
    {"bad lines, long examples", test_bad_lines_and_long},
    {"damaged files", test_damaged_files},
    {"windows: packed and padded", test_windows},
    {"first fit over the open windows", test_first_fit},
    CU_TEST_INFO_NULL};

static CU_SuiteInfo suites[] = {{"sft data", setup, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
