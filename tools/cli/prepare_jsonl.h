/* The documents of a .jsonl file for `fp8run prepare --tokenizer bytes`: one JSON object per
 * line, its "text" field a string (prepare.py reads the same lines the same way, and the tests
 * check that both sides write the same tokens). A line that is blank is skipped; anything else
 * that is not such a record is an error naming the file and the line. */
#ifndef FP8RUN_TOOLS_PREPARE_JSONL_H
#define FP8RUN_TOOLS_PREPARE_JSONL_H

#include <stddef.h>

/* One document: its text (UTF-8, n bytes, may hold NUL). Returns 0, or nonzero to stop. */
typedef int (*prepare_doc_fn)(void *user, const char *text, size_t n);

/* Call doc for each record of data (len bytes; path for messages). Returns 0, or -1 with
 * "PATH:LINE: what" in err (doc's failure: "PATH:LINE: out of memory"). */
int prepare_jsonl_docs(const char *data, size_t len, const char *path, prepare_doc_fn doc, void *user, char *err,
                       size_t errlen);

#endif
