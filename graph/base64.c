/* Base64 codec (see base64.h). */
#include "graph/base64.h"

#include <stdint.h>
#include <stdlib.h>

static const char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fr_status fr_base64_encode(const void *data, size_t n, char **text, size_t *text_len)
{
    *text = NULL;
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3)
        return fr_error(FR_ERR_OOM, "base64: %zu bytes are too many to encode", n);
    size_t out_len = (n + 2) / 3 * 4;
    char *s = fr_malloc(out_len + 1, "base64 text");
    if (!s) return FR_ERR_OOM;
    const uint8_t *p = data;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        s[o++] = k_alphabet[v >> 18];
        s[o++] = k_alphabet[(v >> 12) & 63];
        s[o++] = k_alphabet[(v >> 6) & 63];
        s[o++] = k_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        s[o++] = k_alphabet[v >> 18];
        s[o++] = k_alphabet[(v >> 12) & 63];
        s[o++] = '=';
        s[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        s[o++] = k_alphabet[v >> 18];
        s[o++] = k_alphabet[(v >> 12) & 63];
        s[o++] = k_alphabet[(v >> 6) & 63];
        s[o++] = '=';
    }
    s[o] = '\0';
    *text = s;
    if (text_len) *text_len = o;
    return FR_OK;
}

static int sextet(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

fr_status fr_base64_decode(const char *text, size_t len, const char *what, void **data, size_t *n)
{
    *data = NULL;
    *n = 0;
    if (len % 4 != 0)
        return fr_error(FR_ERR_PARSE, "%s: base64 text of %zu characters is not a multiple of 4 "
                        "(truncated?)", what, len);
    size_t pad = 0;
    if (len >= 4 && text[len - 1] == '=') pad = text[len - 2] == '=' ? 2 : 1;
    size_t out_len = len / 4 * 3 - pad;
    uint8_t *out = fr_malloc(out_len ? out_len : 1, "base64 data");
    if (!out) return FR_ERR_OOM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int last = i + 4 == len, q[4];
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)text[i + (size_t)k];
            q[k] = sextet(c);
            int is_pad = last && c == '=' && (size_t)k >= 4 - pad;
            if (q[k] < 0 && !is_pad) {
                free(out);
                return fr_error(FR_ERR_PARSE, "%s: character %zu of the base64 text (0x%02x) is not "
                                "base64%s", what, i + (size_t)k, c,
                                c == '=' ? " here (padding only at the end)" : "");
            }
            if (is_pad) q[k] = 0;
        }
        uint32_t v = (uint32_t)q[0] << 18 | (uint32_t)q[1] << 12 | (uint32_t)q[2] << 6 | (uint32_t)q[3];
        size_t take = last ? 3 - pad : 3;
        /* canonical form: the bits under the padding are zero */
        if ((take == 1 && (v & 0xffff)) || (take == 2 && (v & 0xff))) {
            free(out);
            return fr_error(FR_ERR_PARSE, "%s: the base64 text ends in a non-canonical group", what);
        }
        out[o++] = (uint8_t)(v >> 16);
        if (take > 1) out[o++] = (uint8_t)(v >> 8);
        if (take > 2) out[o++] = (uint8_t)v;
    }
    *data = out;
    *n = o;
    return FR_OK;
}
