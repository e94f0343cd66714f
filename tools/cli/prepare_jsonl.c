/* .jsonl documents (prepare_jsonl.h). */
#include "prepare_jsonl.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* prepare.py's MAX_JSONL_LINE: one record */
#define MAX_LINE ((size_t)256 << 20)

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    default: return "null";
    }
}

/* The offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
static size_t utf8_prefix(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return i;
        unsigned c1 = s[i + 1 < n ? i + 1 : i];
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90))
            return i; /* overlong, surrogate, beyond U+10FFFF */
        i += k;
    }
    return n;
}

int prepare_jsonl_docs(const char *data, size_t len, const char *path, prepare_doc_fn doc, void *user, char *err,
                       size_t errlen)
{
    int lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *line = data + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + (nl != NULL);
        lineno++;
        if (n > MAX_LINE) {
            snprintf(err, errlen, "%s:%d: a record longer than %zu bytes (refused)", path, lineno, MAX_LINE);
            return -1;
        }
        size_t blank = 0;
        while (blank < n && strchr(" \t\r\f\v", line[blank]) && line[blank]) blank++;
        if (blank == n) continue;
        size_t ok = utf8_prefix((const unsigned char *)line, n);
        if (ok < n) {
            snprintf(err, errlen, "%s:%d: not UTF-8 (byte %zu)", path, lineno, ok + 1);
            return -1;
        }
        json_error_t je;
        /* jansson refuses what prepare.py refuses: bytes that are not UTF-8, nesting deeper than
           its limit, NaN and Infinity */
        json_t *r = json_loadb(line, n, JSON_ALLOW_NUL, &je);
        if (!r) {
            if (strstr(je.text, "depth"))
                snprintf(err, errlen, "%s:%d: JSON nested too deeply", path, lineno);
            else
                snprintf(err, errlen, "%s:%d: not a JSON record with a \"text\" field (%s)", path, lineno, je.text);
            return -1;
        }
        json_t *t = json_is_object(r) ? json_object_get(r, "text") : NULL;
        int rc = 0;
        if (!json_is_object(r))
            snprintf(err, errlen, "%s:%d: not a JSON record with a \"text\" field (a JSON %s, not an object)", path,
                     lineno, type_name(r));
        else if (!t)
            snprintf(err, errlen, "%s:%d: not a JSON record with a \"text\" field (no \"text\" field)", path, lineno);
        else if (!json_is_string(t))
            snprintf(err, errlen, "%s:%d: the \"text\" field is a JSON %s, not a string", path, lineno, type_name(t));
        else if (doc(user, json_string_value(t), json_string_length(t)))
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
        else
            rc = 1;
        json_decref(r);
        if (!rc) return -1;
    }
    return 0;
}
