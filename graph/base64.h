/* Base64 (RFC 4648, standard alphabet, '=' padding, no line breaks): how a compiled graph
 * file (.fbs) carries the original model's protobuf bytes in a string-valued ONNX
 * metadata_props entry, which must hold text. Decoding is strict because the text comes from
 * a model file (hostile input): a length that is not a multiple of 4 (truncated text), a
 * character outside the alphabet, padding anywhere but at the end, or non-zero bits under the
 * padding is FR_ERR_PARSE naming `what`. */
#ifndef FR_BASE64_H
#define FR_BASE64_H

#include <stddef.h>

#include "graph/status.h"

/* Encode n bytes; *text is malloc'ed, NUL-terminated; *text_len (may be NULL) excludes the NUL. */
FR_NODISCARD fr_status fr_base64_encode(const void *data, size_t n, char **text, size_t *text_len);

/* Decode len characters; *data is malloc'ed (at least 1 byte, so never NULL on success) and
 * *n receives the byte count. */
FR_NODISCARD fr_status fr_base64_decode(const char *text, size_t len, const char *what, void **data, size_t *n);

#endif
