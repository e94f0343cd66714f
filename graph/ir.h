/* The graph IR: values (named tensors with dtype and static shape), nodes (op, domain,
 * attributes, value ids in/out), initializers (values holding a constant tensor), graph
 * inputs/outputs and opset imports. Everything refers to values by index, so the arrays
 * can grow while passes rewrite the graph. */
#ifndef FR_IR_H
#define FR_IR_H

#include <stdint.h>

#include "graph/tensor.h"

/* value flags */
#define FR_VAL_INPUT 0x1u       /* graph input fed by the caller */
#define FR_VAL_OUTPUT 0x2u      /* graph output */
#define FR_VAL_INITIALIZER 0x4u /* stored in the model (weights, constants) */
#define FR_VAL_PARAM 0x8u       /* trainable parameter (float initializer by default) */
#define FR_VAL_FOLDED 0x10u     /* constant computed by constant folding */
#define FR_VAL_STATE 0x20u      /* runtime state (FP8 scale/amax of the delayed recipe): bound and
                                   updated by the trainer; never trained, folded or exported */
#define FR_VAL_ONES 0x40u       /* graph input the runtime feeds all ones (the trainer's attention_mask):
                                   a padding mask read from it keeps every key */

typedef struct fr_value {
    char *name;
    fr_dtype dtype;                 /* FR_UNDEFINED until known */
    int rank;                       /* -1 until known */
    int64_t dims[FR_MAX_RANK];      /* -1 for a dim not yet known */
    char *dim_params[FR_MAX_RANK];  /* symbolic dim names from the model (owned) or NULL */
    fr_tensor *constant;            /* initializer / folded constant data (owned) or NULL */
    unsigned flags;
    int producer;                   /* node index, -1 for inputs/initializers */
    char *doc_string;               /* kept for export (owned) or NULL */
    /* external data: where the initializer came from, so export can keep the layout */
    char *external_location;        /* owned or NULL */
    /* the torch.onnx (dynamo) exporter's record (graph/params.h): InputSpec.kind and
     * onnxscript's folded_from list as written, owned or NULL */
    char *torch_kind;
    char *folded_from;
    char *param_note;               /* why it is or is not trained (owned) or NULL */
} fr_value;

/* Attribute types use ONNX's AttributeType numbering. */
typedef enum fr_attr_type {
    FR_ATTR_UNDEFINED = 0,
    FR_ATTR_FLOAT = 1,
    FR_ATTR_INT = 2,
    FR_ATTR_STRING = 3,
    FR_ATTR_TENSOR = 4,
    FR_ATTR_GRAPH = 5, /* not supported: import refuses nodes carrying subgraphs */
    FR_ATTR_FLOATS = 6,
    FR_ATTR_INTS = 7,
    FR_ATTR_STRINGS = 8
} fr_attr_type;

typedef struct fr_attr {
    char *name;
    fr_attr_type type;
    float f;
    int64_t i;
    char *s;           /* STRING: bytes, NUL-terminated for convenience; s_len is exact */
    size_t s_len;
    fr_tensor *t;      /* TENSOR (owned) */
    int n;             /* element count of floats/ints/strings */
    float *floats;
    int64_t *ints;
    char **strings;
} fr_attr;

typedef struct fr_node {
    char *name;        /* never NULL; import names anonymous nodes "<op_type>_<index>" */
    char *op_type;
    char *domain;      /* "" for the default ONNX domain ("ai.onnx" is normalized to "") */
    int n_inputs, n_outputs;
    int *inputs;       /* value ids; -1 for an omitted optional input */
    int *outputs;      /* value ids; -1 for an omitted optional output */
    int n_attrs;
    fr_attr *attrs;
    char *doc_string;  /* owned or NULL */
    char *torch_fx;    /* the exporter's pkg.torch.onnx.fx_node text (owned) or NULL */
    char *torch_scopes; /* its pkg.torch.onnx.name_scopes list (modules, then the op; owned) */
    char *torch_src;   /* the last line of its pkg.torch.onnx.stack_trace: the source (owned) */
    const struct fr_op_def *op; /* resolved by fr_graph_resolve_ops */
    int dead;          /* marked by passes; removed by fr_graph_compact */
} fr_node;

typedef struct fr_opset {
    char *domain;      /* "" for the default domain */
    int64_t version;
} fr_opset;

typedef struct fr_kv {
    char *key, *value;
} fr_kv;

struct fr_name_map;

typedef struct fr_graph {
    char *name;
    fr_value *values;
    int n_values, cap_values;
    fr_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs;       /* value ids of graph inputs (initializers excluded), in model order */
    int n_inputs;
    int *outputs;      /* value ids of graph outputs, in model order */
    int n_outputs;
    int *initializers; /* value ids of initializers, in model order (export keeps it) */
    int n_initializers;
    fr_opset *opsets;
    int n_opsets;
    fr_kv *metadata;   /* model metadata_props */
    char *torch_signature; /* graph metadata pkg.torch.export.ExportedProgram.graph_signature */
    int n_metadata;
    int64_t ir_version, model_version;
    char *producer_name, *producer_version, *domain, *doc_string, *graph_doc_string;
    char *model_dir;   /* folder external data paths are relative to (owned) or NULL */
    char *source_path; /* the file it was loaded from, for messages (owned) or NULL */
    struct fr_name_map *names; /* value name -> id */
} fr_graph;

FR_NODISCARD fr_status fr_graph_new(fr_graph **out);
void fr_graph_free(fr_graph *g);
/* A deep copy of g (graph/graph_clone.c). share_constants != 0: every value->constant of the
 * copy is a header that borrows the source's data (owns_data = 0), so the source must outlive
 * the copy. */
FR_NODISCARD fr_status fr_train_clone_graph(const fr_graph *g, int share_constants, fr_graph **out);
/* Makes g own every constant it borrows from `from` (a copy made with share_constants): the
 * storage changes hands, `from` borrows it now and must go first or not outlive g's use of
 * it. Storage borrowed from elsewhere is copied. */
FR_NODISCARD fr_status fr_graph_take_constants(fr_graph *g, fr_graph *from);

/* Add a value named `name` (must be unique; a duplicate is FR_ERR_GRAPH). Returns its id in
 * *id. Shape starts unknown (rank -1), dtype FR_UNDEFINED. */
FR_NODISCARD fr_status fr_graph_add_value(fr_graph *g, const char *name, int *id);
/* Find a value by name; -1 if absent. */
int fr_graph_find_value(const fr_graph *g, const char *name);
/* A fresh value name "<base>" or "<base>__N" that does not exist yet, added as a value. */
FR_NODISCARD fr_status fr_graph_add_unique_value(fr_graph *g, const char *base, int *id);
/* Set shape/dtype of a value. */
void fr_value_set_shape(fr_value *v, fr_dtype dt, int rank, const int64_t *dims);

/* Append a node. inputs/outputs are value ids (copied). The node gets no attributes; add
 * them with fr_node_set_attr_*. The returned index stays valid; pointers into g->nodes do
 * not survive the next add. Sets each output's producer. */
FR_NODISCARD fr_status fr_graph_add_node(fr_graph *g, const char *op_type, const char *domain,
                            const char *name, int n_in, const int *inputs, int n_out,
                            const int *outputs, int *node_id);

/* Make node nid another node in place: op_type, domain, name and inputs/outputs as for
 * fr_graph_add_node, no attributes, no resolved op; what it came from (doc string, torch
 * fields) is kept. On failure the node is unchanged. */
FR_NODISCARD fr_status fr_node_reset(fr_graph *g, int nid, const char *op_type, const char *domain, const char *name,
                                     int n_in, const int *inputs, int n_out, const int *outputs);

/* Attributes (copying values in). Replaces an attribute of the same name. */
FR_NODISCARD fr_status fr_node_set_attr_int(fr_node *n, const char *name, int64_t v);
FR_NODISCARD fr_status fr_node_set_attr_float(fr_node *n, const char *name, float v);
FR_NODISCARD fr_status fr_node_set_attr_string(fr_node *n, const char *name, const char *v);
FR_NODISCARD fr_status fr_node_set_attr_ints(fr_node *n, const char *name, int count, const int64_t *v);
FR_NODISCARD fr_status fr_node_set_attr_floats(fr_node *n, const char *name, int count, const float *v);
FR_NODISCARD fr_status fr_node_set_attr_tensor(fr_node *n, const char *name, const fr_tensor *t);
void fr_attr_clear(fr_attr *a);
/* Deep copy of every attribute of s onto d (which has none yet). */
FR_NODISCARD fr_status fr_node_copy_attrs(fr_node *d, const fr_node *s);

/* Attribute lookup: NULL if absent. */
const fr_attr *fr_node_attr(const fr_node *n, const char *name);
/* Typed lookups with defaults. A present attribute of the wrong type is an error. */
FR_NODISCARD fr_status fr_node_attr_int(const fr_node *n, const char *name, int64_t dflt, int64_t *out);
FR_NODISCARD fr_status fr_node_attr_float(const fr_node *n, const char *name, float dflt, float *out);
/* *out points into the node (not copied), dflt when absent */
FR_NODISCARD fr_status fr_node_attr_string(const fr_node *n, const char *name, const char *dflt,
                              const char **out);
/* *count = -1 when absent */
FR_NODISCARD fr_status fr_node_attr_ints(const fr_node *n, const char *name, int *count,
                            const int64_t **vals);

/* Opset version of a domain ("" = default); 0 when the model imports none. */
int64_t fr_graph_opset(const fr_graph *g, const char *domain);

/* Mark a value as graph input/output (appends to the lists). */
FR_NODISCARD fr_status fr_graph_mark_input(fr_graph *g, int vid);
FR_NODISCARD fr_status fr_graph_mark_output(fr_graph *g, int vid);
/* Import `domain` at `version` unless the graph imports it already (passes that add
 * ai.fp8run nodes call this so the graph resolves and exports as valid ONNX). */
FR_NODISCARD fr_status fr_graph_import_opset(fr_graph *g, const char *domain, int64_t version);
/* Attach constant data to a value as an initializer (takes ownership of t). Sets dtype and
 * shape from t; float initializers are marked FR_VAL_PARAM. */
FR_NODISCARD fr_status fr_graph_set_initializer(fr_graph *g, int vid, fr_tensor *t);

/* Topological order check and sort: reorders g->nodes so each node comes after the
 * producers of its inputs. A cycle, an input nothing produces (and that is not a graph
 * input or initializer) or a value produced twice is FR_ERR_GRAPH naming node and value. */
FR_NODISCARD fr_status fr_graph_toposort(fr_graph *g);
/* Recompute value->producer from the node list. */
FR_NODISCARD fr_status fr_graph_rebuild_producers(fr_graph *g);
/* Remove nodes marked dead (and values nothing references anymore stay: harmless). */
FR_NODISCARD fr_status fr_graph_compact(fr_graph *g);
/* Fix symbolic dims: every value dim whose dim_param equals `name` becomes `value`. */
FR_NODISCARD fr_status fr_graph_fix_dim(fr_graph *g, const char *name, int64_t value);

/* Number of elements in all FR_VAL_PARAM initializers. */
int64_t fr_graph_param_count(const fr_graph *g);

#endif
