/* Reading the exporter's record (see onnx_record.h). */
#include "graph/onnx_record.h"

#include <string.h>

static const char *meta_get(Onnx__StringStringEntryProto *const *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (kv[i]->key && kv[i]->value && strcmp(kv[i]->key, key) == 0) return kv[i]->value;
    return NULL;
}

/* *dst = a copy of src unless *dst is set or src is NULL. */
static fr_status keep(char **dst, const char *src)
{
    if (*dst || !src) return FR_OK;
    *dst = fr_strdup(src, "exporter record");
    return *dst ? FR_OK : FR_ERR_OOM;
}

fr_status fr_onnx_record_value(fr_value *v, Onnx__StringStringEntryProto *const *kv, size_t n)
{
    FR_TRY(keep(&v->torch_kind, meta_get(kv, n, "pkg.torch.export.graph_signature.InputSpec.kind")));
    return keep(&v->folded_from, meta_get(kv, n, "pkg.onnxscript.optimizer.folded_from"));
}

fr_status fr_onnx_record_node(fr_node *nd, const Onnx__NodeProto *np)
{
    FR_TRY(keep(&nd->torch_fx, meta_get(np->metadata_props, np->n_metadata_props, "pkg.torch.onnx.fx_node")));
    /* only the innermost frame's source line (a scalar folded away may be read there) */
    const char *tr = meta_get(np->metadata_props, np->n_metadata_props, "pkg.torch.onnx.stack_trace");
    if (tr && !nd->torch_src) {
        const char *l = strrchr(tr, '\n');
        l = l ? l + 1 : tr;
        l += strspn(l, " \t");
        FR_TRY(keep(&nd->torch_src, l));
    }
    return keep(&nd->torch_scopes, meta_get(np->metadata_props, np->n_metadata_props, "pkg.torch.onnx.name_scopes"));
}

fr_status fr_onnx_record_graph(fr_graph *g, const Onnx__GraphProto *gp)
{
    return keep(&g->torch_signature, meta_get(gp->metadata_props, gp->n_metadata_props,
                                              "pkg.torch.export.ExportedProgram.graph_signature"));
}
