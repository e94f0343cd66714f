/* Helpers shared by the ONNX import/export tests: an arena for the allocations made while
 * building protobuf messages by hand (freed after each test), a builder of such models,
 * recursive removal of temporary folders, and writing a file in one call. */
#ifndef FR_ONNX_TEST_UTIL_H
#define FR_ONNX_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "schema/onnx.pb-c.h"

void *keep(void *p);          /* remember p (asserts non-NULL); returns it */
void free_kept(void);         /* free everything kept so far */
char *kstr(const char *s);    /* a kept copy of s */
void rm_rf(const char *dir);  /* remove a folder tree, not following symlinks */
void write_bytes(const char *path, const void *d, size_t n);

/* ---- protobuf model builder: every message lives in the arena (keep) ---- */

typedef struct mbuild {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto os[4], *osp[4];
    Onnx__NodeProto *node[32];
    Onnx__TensorProto *init[40];
    Onnx__ValueInfoProto *in[40], *out[40], *vi[40];
} mbuild;

/* An empty model (IR 9) importing the default domain at `opset`; add to b->node, b->init,
 * b->in, b->out, b->vi, counting in b->g.n_*. */
void mb_init(mbuild *b, int64_t opset);
/* "a,,b" -> {"a", "", "b"}; "" or NULL -> none. */
char **split_names(const char *s, size_t *n);
/* A node appended to the graph; ins / outs as split_names; op and name may be NULL. */
Onnx__NodeProto *mb_node(mbuild *b, const char *op, const char *name, const char *ins, const char *outs);
/* An attribute appended to n (type 0: left unset). */
Onnx__AttributeProto *node_attr(Onnx__NodeProto *n, const char *name, int type);
/* A tensor value info; shape: NULL = no shape, "" = scalar, "2,batch,?" = dims (a name is a
 * dim_param, ? unknown). */
Onnx__ValueInfoProto *mk_vi(const char *name, int dt, const char *shape);
/* A tensor value info with fixed dims. */
Onnx__ValueInfoProto *mk_vi_dims(const char *name, int dt, int rank, const int64_t *dims);
/* A tensor header (name may be NULL) without data. */
Onnx__TensorProto *mk_tensor(const char *name, int dt, int rank, const int64_t *dims);
/* raw_data = d[0..n) (d NULL: n zero bytes). */
void set_raw(Onnx__TensorProto *t, const void *d, size_t n);
/* External data at loc; offset / length as the file spells them (NULL: the key is left out). */
void set_external(Onnx__TensorProto *t, const char *loc, const char *offset, const char *length);
/* The serialized model (in the arena). */
void *mb_pack(mbuild *b, size_t *len);
void mb_save(mbuild *b, const char *path);

#endif
