/* .npy reading and writing (see npy.h). The header is a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * parsed here by a small recursive-descent reader that accepts exactly what NumPy accepts:
 * the three keys, each once. */
#include "runtime/io/npy.h"
#include "graph/safe_io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* Header text longer than this is refused before anything is allocated for it: NumPy's own
 * headers are under 200 bytes for any shape fp8run can hold. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

static const struct {
    fr_dtype dt;
    const char *descr;
} codes[] = {
    {FR_F32, "<f4"}, {FR_F64, "<f8"}, {FR_F16, "<f2"}, {FR_I64, "<i8"}, {FR_I32, "<i4"},
    {FR_I16, "<i2"}, {FR_I8, "|i1"},  {FR_U64, "<u8"}, {FR_U32, "<u4"}, {FR_U16, "<u2"},
    {FR_U8, "|u1"},  {FR_BOOL, "|b1"},
};

const char *fr_npy_descr(fr_dtype dt)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].dt == dt) return codes[i].descr;
    return NULL;
}

static int host_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* ---- header parsing ---- */

typedef struct hparse {
    const char *p, *end;
    const char *what;
} hparse;

static fr_status bad_header(const hparse *h, const char *why)
{
    return fr_error(FR_ERR_PARSE, "'%s': malformed .npy header: %s", h->what, why);
}

static void skip_ws(hparse *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r')) h->p++;
}

static int accept(hparse *h, char c)
{
    skip_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string (no escapes: NumPy never writes any in these headers). */
static fr_status parse_string(hparse *h, char *buf, size_t n)
{
    skip_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return bad_header(h, "expected a quoted string");
    char q = *h->p++;
    size_t len = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\') return bad_header(h, "escapes in strings are not supported");
        if (len + 1 >= n) return bad_header(h, "string too long");
        buf[len++] = *h->p++;
    }
    if (h->p >= h->end) return bad_header(h, "unterminated string");
    h->p++;
    buf[len] = '\0';
    return FR_OK;
}

static fr_status parse_shape(hparse *h, int *rank, int64_t *dims)
{
    if (!accept(h, '(')) return bad_header(h, "'shape' must be a tuple");
    *rank = 0;
    for (;;) {
        if (accept(h, ')')) return FR_OK;
        skip_ws(h);
        if (h->p >= h->end || *h->p < '0' || *h->p > '9')
            return bad_header(h, "'shape' must hold non-negative integers");
        int64_t v = 0;
        while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
            int digit = *h->p++ - '0';
            if (v > (INT64_MAX - digit) / 10) return bad_header(h, "a dimension overflows int64");
            v = v * 10 + digit;
        }
        if (h->p < h->end && *h->p == 'L') h->p++; /* Python 2 long literal in old files */
        if (*rank == FR_MAX_RANK)
            return fr_error(FR_ERR_UNSUPPORTED, "'%s': .npy array has more than %d dimensions",
                            h->what, FR_MAX_RANK);
        dims[(*rank)++] = v;
        if (accept(h, ',')) continue;
        if (accept(h, ')')) {
            /* "(5)" is an int in Python, not a tuple: NumPy never writes it */
            if (*rank == 1) return bad_header(h, "'shape' of rank 1 needs a trailing comma");
            return FR_OK;
        }
        return bad_header(h, "expected ',' or ')' in 'shape'");
    }
}

static fr_status parse_header(const char *text, size_t len, const char *what, fr_dtype *dt,
                              int *rank, int64_t *dims)
{
    hparse h = {text, text + len, what};
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
    char descr[64] = "";
    /* the header is ASCII text (NumPy writes nothing else): a NUL would end it early for any
     * reader that takes it as a C string, so two readers could see two different arrays */
    if (memchr(text, '\0', len))
        return fr_error(FR_ERR_PARSE, "'%s': the .npy header holds a NUL byte (at offset %zu of the header)", what,
                        (size_t)((const char *)memchr(text, '\0', len) - text));
    if (!accept(&h, '{')) return bad_header(&h, "expected '{'");
    for (;;) {
        if (accept(&h, '}')) break;
        char key[32];
        FR_TRY(parse_string(&h, key, sizeof key));
        if (!accept(&h, ':')) return bad_header(&h, "expected ':' after a key");
        if (strcmp(key, "descr") == 0 && !have_descr) {
            skip_ws(&h);
            if (h.p < h.end && *h.p == '[')
                return fr_error(FR_ERR_UNSUPPORTED,
                                "'%s': structured .npy dtypes (record arrays) are not supported", what);
            FR_TRY(parse_string(&h, descr, sizeof descr));
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            skip_ws(&h);
            if ((size_t)(h.end - h.p) >= 4 && memcmp(h.p, "True", 4) == 0) {
                fortran = 1;
                h.p += 4;
            } else if ((size_t)(h.end - h.p) >= 5 && memcmp(h.p, "False", 5) == 0) {
                h.p += 5;
            } else {
                return bad_header(&h, "'fortran_order' must be True or False");
            }
            have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            FR_TRY(parse_shape(&h, rank, dims));
            have_shape = 1;
        } else {
            char why[96];
            snprintf(why, sizeof why, "unexpected or repeated key '%s'", key);
            return bad_header(&h, why);
        }
        if (accept(&h, ',')) continue;
        if (accept(&h, '}')) break;
        return bad_header(&h, "expected ',' or '}'");
    }
    skip_ws(&h);
    if (h.p != h.end) return bad_header(&h, "text after the closing '}'");
    if (!have_descr || !have_order || !have_shape)
        return bad_header(&h, "the keys 'descr', 'fortran_order' and 'shape' are all required");

    /* 1-byte types carry no byte order; NumPy writes '|' but '<' and '=' mean the same */
    char norm[64];
    snprintf(norm, sizeof norm, "%s", descr);
    if (strlen(norm) == 3 && norm[2] == '1' && (norm[0] == '<' || norm[0] == '=')) norm[0] = '|';
    if (norm[0] == '=' && host_little_endian()) norm[0] = '<';
    *dt = FR_UNDEFINED;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(codes[i].descr, norm) == 0) *dt = codes[i].dt;
    if (*dt == FR_UNDEFINED) {
        if (norm[0] == '>')
            return fr_error(FR_ERR_UNSUPPORTED,
                            "'%s': big-endian .npy data ('%s') is not supported; save it "
                            "little-endian (arr.astype(arr.dtype.newbyteorder('<')))",
                            what, descr);
        return fr_error(FR_ERR_UNSUPPORTED,
                        "'%s': .npy dtype '%s' is not supported (fp8run reads <f4 <f8 <f2 <i8 "
                        "<i4 <i2 |i1 <u8 <u4 <u2 |u1 |b1)",
                        what, descr);
    }
    if (fortran && *rank > 1) /* for rank <= 1 both orders are the same bytes */
        return fr_error(FR_ERR_UNSUPPORTED,
                        "'%s': .npy array is in Fortran order; save a C-ordered copy "
                        "(np.ascontiguousarray)",
                        what);
    return FR_OK;
}

/* Magic, version and header length from the first bytes. *prefix = bytes before the text. */
static fr_status parse_prefix(const unsigned char *b, size_t avail, const char *what,
                              size_t *prefix, size_t *hlen)
{
    if (avail < 10 || memcmp(b, magic, sizeof magic) != 0)
        return fr_error(FR_ERR_PARSE, "'%s' is not a .npy file (no \\x93NUMPY magic)", what);
    int major = b[6];
    if (major == 1) {
        *prefix = 10;
        *hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if (major == 2 || major == 3) {
        if (avail < 12) return fr_error(FR_ERR_PARSE, "'%s': truncated .npy header", what);
        *prefix = 12;
        *hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return fr_error(FR_ERR_UNSUPPORTED, "'%s': .npy format version %d.%d is not supported",
                        what, major, b[7]);
    }
    if (*hlen > NPY_MAX_HEADER)
        return fr_error(FR_ERR_PARSE, "'%s': .npy header length %zu is implausibly large", what, *hlen);
    return FR_OK;
}

/* Tensor for a parsed header, checking that the data size is exactly `data_avail`. */
static fr_status new_for_header(const char *what, fr_dtype dt, int rank, const int64_t *dims,
                                size_t data_avail, fr_tensor **out)
{
    int64_t n;
    size_t bytes;
    char shp[256];
    fr_shape_str(rank, dims, shp, sizeof shp);
    if (fr_shape_numel(rank, dims, what, &n) != FR_OK || (uint64_t)n > SIZE_MAX ||
        !fr_mul_size((size_t)n, fr_dtype_size(dt), &bytes))
        return fr_error(FR_ERR_PARSE, "'%s': .npy shape %s is too large", what, shp);
    if (bytes > data_avail)
        return fr_error(FR_ERR_PARSE,
                        "'%s': truncated .npy data: shape %s of %s needs %zu bytes, the file holds %zu",
                        what, shp, fr_dtype_name(dt), bytes, data_avail);
    if (bytes < data_avail)
        return fr_error(FR_ERR_PARSE, "'%s': %zu bytes of unexpected data after the .npy array %s",
                        what, data_avail - bytes, shp);
    return fr_tensor_new(dt, rank, dims, what, out);
}

static fr_status check_bools(const fr_tensor *t, const char *what)
{
    if (t->dtype != FR_BOOL) return FR_OK;
    const unsigned char *b = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        if (b[i] > 1)
            return fr_error(FR_ERR_PARSE, "'%s': bool array holds byte value %u at element %zu",
                            what, b[i], i);
    return FR_OK;
}

fr_status fr_npy_load_buffer(const void *data, size_t len, const char *what, fr_tensor **out)
{
    const unsigned char *b = data;
    size_t prefix, hlen;
    fr_dtype dt;
    int rank = 0;
    int64_t dims[FR_MAX_RANK];
    *out = NULL;
    if (!what) what = "<memory>";
    if (!host_little_endian())
        return fr_error(FR_ERR_UNSUPPORTED, "'%s': .npy I/O needs a little-endian host", what);
    if (!data && len) return fr_error(FR_ERR_INVALID_ARG, "'%s': no data", what);
    FR_TRY(parse_prefix(b, len, what, &prefix, &hlen));
    if (hlen > len - prefix)
        return fr_error(FR_ERR_PARSE, "'%s': truncated .npy header (%zu bytes announced, %zu present)",
                        what, hlen, len - prefix);
    FR_TRY(parse_header((const char *)b + prefix, hlen, what, &dt, &rank, dims));
    fr_tensor *t;
    FR_TRY(new_for_header(what, dt, rank, dims, len - prefix - hlen, &t));
    if (t->nbytes) memcpy(t->data, b + prefix + hlen, t->nbytes);
    fr_status st = check_bools(t, what);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

fr_status fr_npy_load(const char *path, fr_tensor **out)
{
    *out = NULL;
    if (!host_little_endian())
        return fr_error(FR_ERR_UNSUPPORTED, "'%s': .npy I/O needs a little-endian host", path);
    FILE *f;
    struct stat sb;
    FR_TRY(fr_fopen_regular(path, ".npy file", 0, &f, &sb));
    fr_status st = FR_OK;
    char *text = NULL;
    fr_tensor *t = NULL;
    unsigned char pre[12];
    size_t prefix, hlen;
    size_t fsize = (size_t)sb.st_size;
    size_t got = fread(pre, 1, fsize < 12 ? fsize : 12, f);
    st = parse_prefix(pre, got, path, &prefix, &hlen);
    if (st != FR_OK) goto done;
    if (hlen > fsize - prefix) {
        st = fr_error(FR_ERR_PARSE, "'%s': truncated .npy header (%zu bytes announced, %zu present)",
                      path, hlen, fsize - prefix);
        goto done;
    }
    text = fr_malloc(hlen ? hlen : 1, "npy header");
    if (!text || fseek(f, (long)prefix, SEEK_SET) != 0 || fread(text, 1, hlen, f) != hlen) {
        st = text ? fr_error(FR_ERR_IO, "'%s': read error", path) : FR_ERR_OOM;
        goto done;
    }
    fr_dtype dt;
    int rank = 0;
    int64_t dims[FR_MAX_RANK];
    st = parse_header(text, hlen, path, &dt, &rank, dims);
    if (st == FR_OK) st = new_for_header(path, dt, rank, dims, fsize - prefix - hlen, &t);
    if (st != FR_OK) goto done;
    if (t->nbytes && fread(t->data, 1, t->nbytes, f) != t->nbytes) {
        st = fr_error(FR_ERR_IO, "'%s': read error (the file shrank while reading?)", path);
        goto done;
    }
    st = check_bools(t, path);
done:
    fclose(f);
    free(text);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

/* ---- writing ---- */

/* The full v1.0 header (magic .. padding and the final newline) into buf; *len = its size. */
static fr_status make_header(const fr_tensor *t, const char *what, char *buf, size_t n, size_t *len)
{
    const char *descr = fr_npy_descr(t->dtype);
    if (!descr)
        return fr_error(FR_ERR_UNSUPPORTED,
                        "%s: NumPy has no type code for %s; convert to float32 first (exact)",
                        what, fr_dtype_name(t->dtype));
    if (t->rank < 0 || t->rank > FR_MAX_RANK)
        return fr_error(FR_ERR_INVALID_ARG, "%s: rank %d is outside 0..%d", what, t->rank, FR_MAX_RANK);
    char shape[256];
    size_t off = 0;
    for (int d = 0; d < t->rank; d++)
        off += (size_t)snprintf(shape + off, sizeof shape - off, "%lld,%s", (long long)t->dims[d],
                                d + 1 < t->rank ? " " : "");
    if (t->rank > 1) shape[off - 1] = '\0'; /* "(2, 3)" but "(5,)" */
    if (t->rank == 0) shape[0] = '\0';
    memcpy(buf, magic, sizeof magic);
    buf[6] = 1;
    buf[7] = 0;
    int k = snprintf(buf + 10, n - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     descr, shape);
    if (k < 0 || (size_t)k + 11 > n) return fr_error(FR_ERR_INTERNAL, "%s: .npy header too long", what);
    size_t total = 10 + (size_t)k + 1; /* + '\n' */
    size_t padded = (total + 63) / 64 * 64; /* NumPy aligns the data to 64 bytes */
    if (padded > n) return fr_error(FR_ERR_INTERNAL, "%s: .npy header too long", what);
    memset(buf + 10 + k, ' ', padded - total);
    buf[padded - 1] = '\n';
    size_t hlen = padded - 10;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    *len = padded;
    return FR_OK;
}

static fr_status check_tensor(const fr_tensor *t, const char *what)
{
    if (!t) return fr_error(FR_ERR_INVALID_ARG, "%s: no tensor", what);
    if (!host_little_endian())
        return fr_error(FR_ERR_UNSUPPORTED, "%s: .npy I/O needs a little-endian host", what);
    int64_t n;
    size_t bytes;
    FR_TRY(fr_shape_numel(t->rank, t->dims, what, &n));
    if ((uint64_t)n > SIZE_MAX || !fr_mul_size((size_t)n, fr_dtype_size(t->dtype), &bytes) ||
        (bytes && (!t->data || t->nbytes < bytes)))
        return fr_error(FR_ERR_INVALID_ARG, "%s: the tensor's data does not match its shape", what);
    return FR_OK;
}

static size_t data_bytes(const fr_tensor *t)
{
    return (size_t)fr_tensor_numel(t) * fr_dtype_size(t->dtype);
}

fr_status fr_npy_save_buffer(const fr_tensor *t, void **data, size_t *len)
{
    char hdr[512];
    size_t hl;
    *data = NULL;
    *len = 0;
    FR_TRY(check_tensor(t, "npy buffer"));
    FR_TRY(make_header(t, "npy buffer", hdr, sizeof hdr, &hl));
    size_t db = data_bytes(t);
    unsigned char *buf = fr_malloc(hl + db, "npy buffer");
    if (!buf) return FR_ERR_OOM;
    memcpy(buf, hdr, hl);
    if (db) memcpy(buf + hl, t->data, db);
    *data = buf;
    *len = hl + db;
    return FR_OK;
}

fr_status fr_npy_save(const char *path, const fr_tensor *t)
{
    char hdr[512];
    size_t hl;
    FR_TRY(check_tensor(t, path));
    FR_TRY(make_header(t, path, hdr, sizeof hdr, &hl));
    size_t plen = strlen(path) + 32;
    char *tmp = fr_malloc(plen, "npy temporary name");
    if (!tmp) return FR_ERR_OOM;
    snprintf(tmp, plen, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wbx");
    if (!f) {
        fr_status st = fr_error(FR_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    size_t db = data_bytes(t);
    int ok = fwrite(hdr, 1, hl, f) == hl && (db == 0 || fwrite(t->data, 1, db, f) == db);
    ok = (fflush(f) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fr_status st = fr_error(FR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return FR_OK;
}
