/* Helpers shared by the ONNX import/export tests: an arena for the allocations made while
 * building protobuf messages by hand (freed after each test), recursive removal of temporary
 * folders, and writing a file in one call. */
#ifndef FR_ONNX_TEST_UTIL_H
#define FR_ONNX_TEST_UTIL_H

#include <stddef.h>

void *keep(void *p);          /* remember p (asserts non-NULL); returns it */
void free_kept(void);         /* free everything kept so far */
char *kstr(const char *s);    /* a kept copy of s */
void rm_rf(const char *dir);  /* remove a folder tree, not following symlinks */
void write_bytes(const char *path, const void *d, size_t n);

#endif
