"""A torch module in, weights out: fp8run.from_torch exports a module through torch.onnx
(dynamo=True, opset 18, its forward bound to return logits only: the settings that work for
Hugging Face models with transformers 5, see tools/gen_hf_exports.py) and returns a Model whose
parameters keep the module's names; Session.state_dict() gives the trained weights back under
those names, for module.load_state_dict(..., strict=False). torch is imported only here, and
only when these are called."""
import contextlib
import functools
import inspect
import os
import tempfile


@contextlib.contextmanager
def _logits_only(module):
    """The module itself (so that ONNX initializers carry its parameter names), in eval mode, its
    forward bound to return a plain tuple without a cache when it takes those arguments (Hugging
    Face models); restored afterwards."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        params = {}
    kw = {k: v for k, v in (("return_dict", False), ("use_cache", False)) if k in params}
    had = "forward" in vars(module)
    old_forward, was_training = module.forward, module.training
    if kw:
        module.forward = functools.partial(old_forward, **kw)
    module.eval()
    try:
        yield module
    finally:
        if kw:
            if had:
                module.forward = old_forward
            else:
                del module.forward
        module.train(was_training)


def from_torch(module, example_inputs, path=None, *, opset=18, input_names=("input_ids",), output_name="logits",
               dynamic_shapes=None, external_data=None):
    """Export `module` with example_inputs (a tensor of token ids [B, T], or a tuple of inputs)
    through torch.onnx.export(dynamo=True) and load it as an fp8run Model. path: where the ONNX
    file goes (default: a temporary folder that lives as long as the Model). Its parameters keep
    the module's names, so Session.state_dict(module) gives weights the module loads. The
    first output (logits) is what fp8run trains on. external_data: weights in a separate file
    (default: when they pass 1 GiB). dynamic_shapes: torch.export's, keyed by input name."""
    import torch  # noqa: F401  (a clear ImportError when torch is missing)
    from . import Model
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    tmp = None
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="fp8run_torch_")
        path = os.path.join(tmp.name, "model.onnx")
    names = list(input_names)[:len(args)]
    with _logits_only(module) as m, torch.no_grad():
        prog = torch.onnx.export(m, args, dynamo=True, opset_version=opset, input_names=names,
                                 output_names=[output_name], dynamic_shapes=dynamic_shapes)
    if external_data is None:  # protobuf's 2 GB limit: big weights go to model.onnx.data
        external_data = sum(p.numel() * p.element_size() for p in module.parameters()) > (1 << 30)
    prog.save(os.fspath(path), external_data=external_data)
    model = Model(path)
    model._torch_tmp = tmp  # the file stays while the Model does
    return model


def state_dict(session, module=None):
    """{name: torch.Tensor} of the session's trained parameters (the ONNX model's names, which
    from_torch keeps as the module's); with `module`, only those it has, in its dtypes and shapes.
    Load with module.load_state_dict(sd, strict=False): tied weights (lm_head sharing the
    embedding) and buffers are not in the ONNX model's parameters."""
    import torch
    own = module.state_dict() if module is not None else None
    out = {}
    for p in session.parameters:
        if own is not None and p.name not in own:
            continue  # not one of the module's weights
        t = torch.from_numpy(session.get_param(p.name))
        if own is not None:
            t = t.to(dtype=own[p.name].dtype).reshape(own[p.name].shape)
        out[p.name] = t
    return out
