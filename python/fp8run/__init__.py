"""fp8run from Python: FP8 training of ONNX models through libfp8run's C API (ctypes, no
compiled extension).

    import numpy as np, fp8run
    model = fp8run.Model("model.onnx")
    sess = fp8run.Session(model, batch=8, seq=128, precision="fp8", lr=3e-4)
    loss = sess.train_step(windows)          # int64/int32 array [B, T+1] (or [K, B, T+1])
    w = sess.get_param("lm_head.weight")     # numpy float32 array
    sess.save("run.ckpt"); sess.export("trained.onnx")

Errors raise fp8run.Error with the library's message. The library is found through
$FP8RUN_LIBRARY, next to this package, in the repository's build/ folder, or on the system's
library path."""
import ctypes
import json
from collections import namedtuple

import numpy as np

from . import _lib

__all__ = ["Error", "Model", "Session", "DataLoader", "Checkpoint", "Safetensors", "LoadReport", "Report", "TensorInfo", "StepStats",
           "version", "abi_version", "is_checkpoint", "checkpoint_to_safetensors", "set_log_callback", "library_path",
           "plot", "prepare", "train", "from_torch", "Progress", "log_to_python", "sample", "is_sft_file"]

_L = _lib.load()

# status numbers (include/fp8run.h)
OK, ERR_INVALID_ARG, ERR_IO, ERR_PARSE, ERR_UNSUPPORTED, ERR_SHAPE, ERR_OOM, ERR_RANGE, ERR_GRAPH, \
    ERR_NUMERIC, ERR_DEVICE, ERR_INTERNAL, ERR_UNAVAILABLE, ERR_STATE = range(14)

_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
           9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
           17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz"}
_INT64, _INT32, _UINT16, _UINT32, _UINT8, _FLOAT32 = 7, 6, 4, 12, 2, 1
# numpy types of the dtypes that have one (bfloat16 and FP8 outputs are given as float32)
_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
       10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
_NP_CODE = {np.dtype(t): code for code, t in _NP.items()}


class Error(Exception):
    """A failed fp8run call: .status (the number), .status_name and the library's message."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _str(_L.fp8run_status_name(status))
        self.message = message
        super().__init__("%s (%s)" % (message, self.status_name))


def _str(b):
    return None if b is None else b.decode("utf-8", "replace")


def _bytes(s, what="argument"):
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    if not isinstance(s, str):
        raise TypeError("%s must be a str, not %s" % (what, type(s).__name__))
    return s.encode("utf-8")


def _path(p):
    import os
    return _bytes(os.fspath(p), "path")


def _check(status):
    if status != OK:
        raise Error(status, _str(_L.fp8run_last_error()))


def version():
    """The library's version, e.g. "0.1.0"."""
    return _str(_L.fp8run_version())


def abi_version():
    return _L.fp8run_abi_version()


def library_path():
    """The libfp8run.so this module loaded."""
    return _L.path


_LEVELS = ["debug", "info", "warn", "error"]
_log_keep = None  # the ctypes callback must outlive its registration


def set_log_callback(fn, level="info"):
    """fn(level_name, message) receives the library's log messages at `level` and above
    ("debug", "info", "warn", "error"); None turns logging off. fn may be called from any
    thread that is inside the library."""
    global _log_keep
    if fn is None:
        _L.fp8run_set_log_callback(_lib.LOG_FN(), None, 0)
        _log_keep = None
        return

    def tramp(_user, lvl, msg):
        try:
            fn(_LEVELS[lvl] if 0 <= lvl < 4 else str(lvl), _str(msg))
        except Exception:  # an exception cannot cross the C boundary
            pass

    cb = _lib.LOG_FN(tramp)
    _L.fp8run_set_log_callback(cb, None, _LEVELS.index(level))
    _log_keep = cb


TensorInfo = namedtuple("TensorInfo", "name dtype shape")
TensorInfo.__doc__ = """A graph input/output or parameter: shape holds ints, symbolic dim names
(str) and None for unnamed unknown dims; shape is None when the rank is unknown."""


def _info(v):
    if v.rank < 0:
        shape = None
    else:
        shape = tuple(v.dims[d] if v.dims[d] >= 0 else _str(v.dim_names[d]) for d in range(v.rank))
    return TensorInfo(_str(v.name), _DTYPES.get(v.dtype, "undefined"), shape)


def _infos(count_fn, get_fn, handle):
    out = []
    for i in range(count_fn(handle)):
        v = _lib.sized(_lib.ValueInfo)
        _check(get_fn(handle, i, ctypes.byref(v)))
        out.append(_info(v))
    return out


def _f32_buffer(array, numel, what):
    a = np.ascontiguousarray(array, dtype=np.float32)
    if a.size != numel:
        raise Error(ERR_SHAPE, "%s has %d elements, the array %d" % (what, numel, a.size))
    return a


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------

_STR_FIELDS = {o["name"] for o in _lib.TRAIN_CONFIG_OPTIONS if o["type"] in (_lib.OPTION_STRING, _lib.OPTION_CHOICE)}
_ALIASES = {"train": "train_regex", "freeze": "freeze_regex", "schedule": "lr_schedule",
            "warmup": "warmup_steps", "steps": "total_steps"}
_CONFIG_FIELDS = {f for f, _ in _lib.TrainConfig._fields_} - {"struct_size", "dim_names", "dim_values", "n_dims"}


def _config(batch, seq, kw):
    """A TrainConfig from keyword arguments (the header's field names, plus dims={name: value}
    and the aliases train/freeze/schedule/warmup/steps)."""
    c = _lib.TrainConfig()
    _check(_L.fp8run_train_config_init(ctypes.byref(c), ctypes.sizeof(c)))
    c.batch = batch
    c.seq_len = seq
    keep = []
    for key, value in kw.items():
        field = _ALIASES.get(key, key)
        if field == "dims":
            items = list(dict(value).items())
            names = (ctypes.c_char_p * max(1, len(items)))(*[_bytes(k) for k, _ in items])
            values = (ctypes.c_int64 * max(1, len(items)))(*[int(v) for _, v in items])
            c.dim_names = ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))
            c.dim_values = ctypes.cast(values, ctypes.POINTER(ctypes.c_int64))
            c.n_dims = len(items)
            keep += [names, values]
        elif field in _STR_FIELDS:
            b = _bytes(value, key)
            keep.append(b)
            setattr(c, field, b)
        elif field in _CONFIG_FIELDS:
            setattr(c, field, value)
        else:
            raise TypeError("unknown fp8run option %r; known: %s" % (key, ", ".join(
                sorted(_CONFIG_FIELDS | set(_ALIASES) | {"dims"}))))
    c._keep = keep  # the strings and arrays must live as long as the struct
    return c


# ---------------------------------------------------------------------------------------------
# models and reports
# ---------------------------------------------------------------------------------------------

class _Handle:
    _destroy = None

    def __init__(self):
        self._h = None

    def close(self):
        if self._h:
            getattr(_L, self._destroy)(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise Error(ERR_STATE, "%s is closed" % type(self).__name__)
        return self._h


class Model(_Handle):
    """An ONNX model: Model(path) or Model(data=bytes, name=...)."""
    _destroy = "fp8run_model_destroy"

    def __init__(self, path=None, *, data=None, name=None):
        super().__init__()
        h = ctypes.c_void_p()
        if (path is None) == (data is None):
            raise TypeError("give a path or data=bytes")
        if path is not None:
            _check(_L.fp8run_model_load(_path(path), ctypes.byref(h)))
        else:
            buf = bytes(data)
            _check(_L.fp8run_model_load_buffer(buf, len(buf), _bytes(name), ctypes.byref(h)))
        self._h = h

    @property
    def path(self):
        return _str(_L.fp8run_model_path(self._handle()))

    @property
    def inputs(self):
        return _infos(_L.fp8run_model_input_count, _L.fp8run_model_input, self._handle())

    @property
    def outputs(self):
        return _infos(_L.fp8run_model_output_count, _L.fp8run_model_output, self._handle())

    @property
    def parameters(self):
        """The parameters (what training updates), in model order, under the module's names
        (`fp8run info` lists the other float initializers and why they are not trained)."""
        return _infos(_L.fp8run_model_param_count, _L.fp8run_model_param, self._handle())

    @property
    def param_count(self):
        """Elements in all parameters."""
        return _L.fp8run_model_param_elements(self._handle())

    @property
    def nonfinite(self):
        """{name: count} of the parameters that held NaN or Inf values when loaded."""
        h, out, c = self._handle(), {}, ctypes.c_int64()
        for i in range(_L.fp8run_model_nonfinite_params(h)):
            name = _str(_L.fp8run_model_nonfinite_param(h, i, ctypes.byref(c)))
            out[name] = c.value
        return out

    def _param_info(self, name):
        for p in self.parameters:
            if p.name == name:
                return p
        raise Error(ERR_INVALID_ARG, "the model has no parameter named '%s'" % name)

    def get_param(self, name):
        p = self._param_info(name)
        out = np.empty(p.shape, dtype=np.float32)
        _check(_L.fp8run_model_get_param(self._handle(), _bytes(name), out.ctypes.data, out.size))
        return out

    def set_param(self, name, value):
        p = self._param_info(name)
        a = _f32_buffer(value, int(np.prod(p.shape, dtype=np.int64)), "parameter '%s'" % name)
        _check(_L.fp8run_model_set_param(self._handle(), _bytes(name), a.ctypes.data, a.size))

    def load_safetensors(self, path, strict=False, strict_weights=False):
        """Put a safetensors checkpoint's tensors (a path or a Safetensors) into the parameters
        of the same names; returns a LoadReport (matched, missing, unexpected names, and
        nonfinite: {name: NaN/Inf count}). strict: a missing or unexpected name raises;
        strict_weights: a tensor with NaN/Inf raises (nothing loaded either way)."""
        return _load_safetensors(_L.fp8run_model_load_safetensors, self._handle(), path, strict, strict_weights)

    def save_safetensors(self, folder, dtype="float32", max_shard_bytes=0):
        """Write the parameters as a Hugging Face checkpoint (folder/model.safetensors, or
        shards with model.safetensors.index.json beyond max_shard_bytes; 0: 5 GB)."""
        _check(_L.fp8run_model_save_safetensors(self._handle(), _path(folder), _st_dtype(dtype), max_shard_bytes))

    def apply_checkpoint(self, path):
        """Put a checkpoint's weights into the parameters; returns how many."""
        n = ctypes.c_int()
        _check(_L.fp8run_model_apply_checkpoint(self._handle(), _path(path), ctypes.byref(n)))
        return n.value

    def save(self, path):
        _check(_L.fp8run_model_save(self._handle(), _path(path)))

    def compile(self, batch=1, seq=1, **config):
        """The FP8 compiler's report for these options, without building a session."""
        c = _config(batch, seq, config)
        r = ctypes.c_void_p()
        _check(_L.fp8run_model_compile(self._handle(), ctypes.byref(c), ctypes.byref(r)))
        return Report._take(r)

    def write_compiled(self, path, batch, seq, **config):
        """Compile for batch x seq (precision "fp8" unless given) and write a compiled graph
        (.fbs) that trains without compiling again; returns its recorded Report."""
        config.setdefault("precision", "fp8")
        c = _config(batch, seq, config)
        r = ctypes.c_void_p()
        _check(_L.fp8run_model_write_compiled(self._handle(), ctypes.byref(c), _path(path), ctypes.byref(r)))
        return Report._take(r)

    def export(self, path):
        """Write the ONNX model: for a compiled graph the original model with its weights."""
        _check(_L.fp8run_model_export(self._handle(), _path(path)))

    @property
    def info(self):
        """What the file says about itself: producer, ir_version, opsets {domain: version},
        nodes, initializers, initializer_bytes, compiled."""
        h = self._handle()
        mi = _lib.sized(_lib.ModelInfo)
        _check(_L.fp8run_model_get_info(h, ctypes.byref(mi)))
        opsets = {}
        for i in range(mi.n_opsets):
            d, v = ctypes.c_char_p(), ctypes.c_int64()
            _check(_L.fp8run_model_opset(h, i, ctypes.byref(d), ctypes.byref(v)))
            opsets[_str(d.value) or "ai.onnx"] = v.value
        producer = " ".join(x for x in (_str(mi.producer_name), _str(mi.producer_version)) if x)
        return {"producer": producer, "graph": _str(mi.graph_name), "ir_version": mi.ir_version, "opsets": opsets,
                "nodes": mi.n_nodes, "initializers": mi.n_initializers,
                "initializer_bytes": mi.initializer_bytes, "compiled": bool(mi.compiled)}

    @property
    def op_histogram(self):
        """[(op_type, count)], most frequent first."""
        h = self._handle()
        mi = _lib.sized(_lib.ModelInfo)
        _check(_L.fp8run_model_get_info(h, ctypes.byref(mi)))
        out = []
        for i in range(mi.n_op_types):
            op = _lib.sized(_lib.OpInfo)
            _check(_L.fp8run_model_op(h, i, ctypes.byref(op)))
            out.append((_str(op.op_type), op.count))
        return out

    @property
    def compiled_for(self):
        """(batch, seq, precision) of a compiled graph; None for an ONNX model."""
        if not self.info["compiled"]:
            return None
        b, t, p = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_char_p()
        _check(_L.fp8run_model_compiled_for(self._handle(), ctypes.byref(b), ctypes.byref(t), ctypes.byref(p)))
        return b.value, t.value, _str(p.value)

    def recorded_report(self):
        """The Report a compiled graph records."""
        r = ctypes.c_void_p()
        _check(_L.fp8run_model_report(self._handle(), ctypes.byref(r)))
        return Report._take(r)

    def run(self, inputs, dims=None):
        """The forward pass on the CPU: inputs {name: array} (symbolic dims from their shapes and
        dims={name: value}); returns {output name: array} (bfloat16/FP8 outputs as float32)."""
        arrays = {}
        for name, value in inputs.items():
            a = np.ascontiguousarray(value)
            if a.dtype not in _NP_CODE:
                raise TypeError("input %r: dtype %s has no fp8run type" % (name, a.dtype))
            arrays[name] = a
        cfg = _lib.PrepareConfig()
        _check(_L.fp8run_prepare_config_init(ctypes.byref(cfg), ctypes.sizeof(cfg)))
        keep = []
        items = list((dims or {}).items())
        if items:
            names = (ctypes.c_char_p * len(items))(*[_bytes(k) for k, _ in items])
            values = (ctypes.c_int64 * len(items))(*[int(v) for _, v in items])
            cfg.dim_names = ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))
            cfg.dim_values = ctypes.cast(values, ctypes.POINTER(ctypes.c_int64))
            cfg.n_dims = len(items)
            keep += [names, values]
        n = len(arrays)
        if n:
            in_names = (ctypes.c_char_p * n)(*[_bytes(k) for k in arrays])
            ranks = (ctypes.c_int * n)(*[a.ndim for a in arrays.values()])
            shapes = [(ctypes.c_int64 * max(1, a.ndim))(*a.shape) for a in arrays.values()]
            dims_p = (ctypes.POINTER(ctypes.c_int64) * n)(*[ctypes.cast(x, ctypes.POINTER(ctypes.c_int64))
                                                             for x in shapes])
            cfg.input_names = ctypes.cast(in_names, ctypes.POINTER(ctypes.c_char_p))
            cfg.input_ranks = ctypes.cast(ranks, ctypes.POINTER(ctypes.c_int))
            cfg.input_dims = ctypes.cast(dims_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)))
            cfg.n_inputs = n
            keep += [in_names, ranks, shapes, dims_p]
        f = ctypes.c_void_p()
        _check(_L.fp8run_forward_create(self._handle(), ctypes.byref(cfg), ctypes.byref(f)))
        try:
            for name, a in arrays.items():
                t = _lib.sized(_lib.Tensor)
                t.name, t.dtype, t.rank = _bytes(name), _NP_CODE[a.dtype], a.ndim
                for d, size in enumerate(a.shape):
                    t.dims[d] = size
                t.data, t.nbytes = a.ctypes.data, a.nbytes
                _check(_L.fp8run_forward_set_input(f, ctypes.byref(t)))
            _check(_L.fp8run_forward_run(f))
            out = {}
            for i in range(_L.fp8run_forward_output_count(f)):
                t = _lib.sized(_lib.Tensor)
                _check(_L.fp8run_forward_output(f, i, ctypes.byref(t)))
                shape = tuple(t.dims[d] for d in range(t.rank))
                if t.dtype in _NP:
                    a = np.empty(shape, dtype=_NP[t.dtype])
                    ctypes.memmove(a.ctypes.data, t.data, t.nbytes)
                else:
                    a = np.empty(shape, dtype=np.float32)
                    _check(_L.fp8run_convert_to_float32(t.dtype, t.data, a.size, a.ctypes.data))
                out[_str(t.name)] = a
            return out
        finally:
            _L.fp8run_forward_destroy(f)

    @staticmethod
    def generate_llama(preset="tiny", **fields):
        """A Llama-style model with random weights: a preset ("tiny", "125m", "1b", "8b") with fields
        overridden (dim, layers, heads, kv_heads, ffn, vocab, max_seq, seed)."""
        c = _lib.LlamaConfig()
        _check(_L.fp8run_llama_config_init(ctypes.byref(c), ctypes.sizeof(c)))
        _check(_L.fp8run_llama_config_preset(ctypes.byref(c), _bytes(preset)))
        for key, value in fields.items():
            if key == "struct_size" or key not in {f for f, _ in _lib.LlamaConfig._fields_}:
                raise TypeError("unknown llama option %r" % key)
            setattr(c, key, value)
        h = ctypes.c_void_p()
        _check(_L.fp8run_model_generate_llama(ctypes.byref(c), ctypes.byref(h)))
        m = Model.__new__(Model)
        _Handle.__init__(m)
        m._h = h
        return m


Layer = namedtuple("Layer", "name precision why recipe weights sources n_fused has_bias k n pad_multiple pad_k pad_n")
Skipped = namedtuple("Skipped", "node op_type weight reason")


class Report:
    """What the FP8 compiler did: .precision, .layers (Layer tuples), .skipped, .text."""

    @classmethod
    def _take(cls, handle):
        self = cls()
        try:
            h = handle
            self.precision = _str(_L.fp8run_report_precision(h))
            self.text = _str(_L.fp8run_report_text(h))
            self.layers = []
            for i in range(_L.fp8run_report_layer_count(h)):
                li = _lib.sized(_lib.LayerInfo)
                _check(_L.fp8run_report_layer(h, i, ctypes.byref(li)))
                self.layers.append(Layer(_str(li.name), _str(li.precision), _str(li.why), _str(li.recipe),
                                         _str(li.weights), _str(li.sources), li.n_fused, bool(li.has_bias),
                                         li.k, li.n, li.pad_multiple, li.pad_k, li.pad_n))
            self.skipped = []
            for i in range(_L.fp8run_report_skipped_count(h)):
                si = _lib.sized(_lib.SkippedInfo)
                _check(_L.fp8run_report_skipped(h, i, ctypes.byref(si)))
                self.skipped.append(Skipped(_str(si.node), _str(si.op_type), _str(si.weight), _str(si.reason)))
            self.linears = {p: _L.fp8run_report_linears(h, p.encode()) for p in ("fp8", "bf16", "fp32")}
        finally:
            _L.fp8run_report_destroy(handle)
        return self

    def __str__(self):
        return self.text


# ---------------------------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------------------------

StepStats = namedtuple("StepStats", "step loss grad_norm lr skipped bad_in_a_row reason")


def _stats(st):
    return StepStats(st.step, st.loss, st.grad_norm, st.lr, bool(st.skipped), st.bad_in_a_row, _str(st.reason))


def _windows(array, count, what):
    """A C-contiguous int64/int32 array of `count` ids, as (array, dtype number)."""
    a = np.asarray(array)
    if a.dtype == np.int32:
        a, dt = np.ascontiguousarray(a), _INT32
    elif a.dtype.kind in "iu":
        a, dt = np.ascontiguousarray(a, dtype=np.int64), _INT64
    else:
        raise TypeError("%s: token windows must be an integer array, not %s" % (what, a.dtype))
    if a.size != count:
        raise Error(ERR_SHAPE, "%s: got %d token ids (shape %s); the session takes %d" % (what, a.size, a.shape, count))
    return a, dt


class Session(_Handle):
    """Training (and evaluation) of a model on a backend ("cpu", "cuda", "auto").

    Session(model, batch=B, seq=T, backend="cpu", precision="fp32", lr=1e-3, ...): the other
    keyword arguments are the fields of fp8run_train_config (include/fp8run.h), e.g.
    grad_accum, recipe, fp8_format, bf16_boundary, fp8_exclude, fuse, pad_multiple, optimizer,
    weight_decay, lr_schedule, warmup_steps, total_steps, min_lr, grad_clip, seed,
    train_regex, freeze_regex, dims={name: value}, eval_only, fuse_attention, fuse_swiglu,
    recompute."""
    _destroy = "fp8run_session_destroy"

    def __init__(self, model, batch, seq, backend="cpu", **config):
        super().__init__()
        c = _config(batch, seq, config)
        h = ctypes.c_void_p()
        _check(_L.fp8run_session_create(model._handle(), _bytes(backend), ctypes.byref(c), ctypes.byref(h)))
        self._h = h
        self.last_stats = None

    batch = property(lambda self: _L.fp8run_session_batch(self._handle()))
    seq_len = property(lambda self: _L.fp8run_session_seq_len(self._handle()))
    grad_accum = property(lambda self: _L.fp8run_session_grad_accum(self._handle()))
    vocab = property(lambda self: _L.fp8run_session_vocab(self._handle()))
    steps_done = property(lambda self: _L.fp8run_session_steps_done(self._handle()))
    steps_skipped = property(lambda self: _L.fp8run_session_steps_skipped(self._handle()))
    backend = property(lambda self: _str(_L.fp8run_session_backend(self._handle())))
    state_dict = lambda self, module=None: _state_dict(self, module)  # noqa: E731 (torch_export.state_dict)

    @property
    def config(self):
        """The options as a dict (what checkpoints record)."""
        j = _L.fp8run_session_config_json(self._handle())
        if j is None:
            _check(ERR_INTERNAL)
        return json.loads(_str(j))

    @property
    def report(self):
        r = ctypes.c_void_p()
        _check(_L.fp8run_session_report(self._handle(), ctypes.byref(r)))
        return Report._take(r)

    def train_step(self, windows):
        """One optimizer step on grad_accum micro-batches of B windows of T+1 token ids
        (shape [B, T+1], or [K, B, T+1]); returns the loss. .last_stats has the rest."""
        h = self._handle()
        n = self.grad_accum * self.batch * (self.seq_len + 1)
        a, dt = _windows(windows, n, "train_step")
        st = _lib.sized(_lib.StepStats)
        _check(_L.fp8run_session_train_step(h, a.ctypes.data, dt, a.size, ctypes.byref(st)))
        self.last_stats = _stats(st)
        return st.loss

    def train_step_async(self, windows):
        """Queue one step without waiting for it (on a GPU the host runs ahead); returns the
        step's index. Its statistics come from poll_stats(), oldest first."""
        h = self._handle()
        n = self.grad_accum * self.batch * (self.seq_len + 1)
        a, dt = _windows(windows, n, "train_step_async")
        step = ctypes.c_int64()
        _check(_L.fp8run_session_train_step_async(h, a.ctypes.data, dt, a.size, ctypes.byref(step)))
        return step.value

    def poll_stats(self, wait=True):
        """The StepStats of the oldest queued step not polled yet (wait=False: None when it has
        not finished; None when nothing is queued). Errors found on the device for that step
        raise here (see fp8run_session_poll_stats)."""
        st = _lib.sized(_lib.StepStats)
        _check(_L.fp8run_session_poll_stats(self._handle(), 1 if wait else 0, ctypes.byref(st)))
        return _stats(st) if st.available else None

    steps_queued = property(lambda self: _L.fp8run_session_steps_queued(self._handle()))

    def eval(self, windows):
        """The loss of one micro-batch ([B, T+1]) without updating anything."""
        h = self._handle()
        a, dt = _windows(windows, self.batch * (self.seq_len + 1), "eval")
        loss = ctypes.c_double()
        _check(_L.fp8run_session_eval(h, a.ctypes.data, dt, a.size, ctypes.byref(loss)))
        return loss.value

    def _sft(self, what, windows, segments, targets, k):
        n = k * self.batch * (self.seq_len + 1)
        arrays = []
        for a, dt in ((windows, np.int64), (segments, np.int32), (targets, np.uint8)):
            a = np.ascontiguousarray(a, dtype=dt)
            if a.size != n:
                raise Error(ERR_SHAPE, "%s: %d values; this session takes %d x %d x %d" % (what, a.size, k, self.batch,
                                                                                           self.seq_len + 1))
            arrays.append(a)
        return arrays

    def train_step_sft(self, windows, segments, targets):
        """One step on SFT batches (DataLoader.next_sft's arrays; a session made with sft=1):
        the loss is the mean over the step's target tokens. Returns it."""
        w, s, t = self._sft("train_step_sft", windows, segments, targets, self.grad_accum)
        st = _lib.sized(_lib.StepStats)
        _check(_L.fp8run_session_train_step_sft(self._handle(), w.ctypes.data, s.ctypes.data, t.ctypes.data, w.size,
                                                ctypes.byref(st)))
        self.last_stats = _stats(st)
        return st.loss

    sft_positions = property(lambda self: bool(_L.fp8run_session_sft_positions(self._handle())),
                             doc="False when packed SFT examples would see positions offset by the examples "
                                 "before them (the model computes absolute positions inside its graph)")

    def eval_sft(self, windows, segments, targets):
        """(loss, target tokens) of one SFT micro-batch without updating anything."""
        w, s, t = self._sft("eval_sft", windows, segments, targets, 1)
        loss, n = ctypes.c_double(), ctypes.c_int64()
        _check(_L.fp8run_session_eval_sft(self._handle(), w.ctypes.data, s.ctypes.data, t.ctypes.data, w.size,
                                          ctypes.byref(loss), ctypes.byref(n)))
        return loss.value, n.value

    def output(self, name=None):
        """A model output of the last eval (default: the logits) as a float32 array."""
        h = self._handle()
        v = _lib.sized(_lib.ValueInfo)
        _check(_L.fp8run_session_eval_output(h, _bytes(name), ctypes.byref(v), None, 0))
        out = np.empty(tuple(v.dims[d] for d in range(v.rank)), dtype=np.float32)
        _check(_L.fp8run_session_eval_output(h, _bytes(name), None, out.ctypes.data, out.size))
        return out

    @property
    def parameters(self):
        """The trained parameters (original names and shapes)."""
        return _infos(_L.fp8run_session_param_count, _L.fp8run_session_param, self._handle())

    def _shape(self, name):
        for p in self.parameters:
            if p.name == name:
                return p.shape
        raise Error(ERR_INVALID_ARG, "'%s' is not a parameter this session trains" % name)

    def get_param(self, name):
        out = np.empty(self._shape(name), dtype=np.float32)
        _check(_L.fp8run_session_get_param(self._handle(), _bytes(name), out.ctypes.data, out.size))
        return out

    def set_param(self, name, value):
        shape = self._shape(name)
        a = _f32_buffer(value, int(np.prod(shape, dtype=np.int64)), "parameter '%s'" % name)
        _check(_L.fp8run_session_set_param(self._handle(), _bytes(name), a.ctypes.data, a.size))

    def save(self, path, data=None):
        """Write a checkpoint (with the DataLoader's position when given)."""
        _check(_L.fp8run_session_save(self._handle(), _path(path), data._handle() if data else None))

    def load(self, path, data=None):
        """Restore a checkpoint (and the DataLoader's position when given)."""
        _check(_L.fp8run_session_load(self._handle(), _path(path), data._handle() if data else None))

    def export(self, path):
        """Write the original model with the trained weights as ONNX."""
        _check(_L.fp8run_session_export(self._handle(), _path(path)))

    def export_adapter(self, folder):
        """A LoRA session's adapters as PEFT writes them: folder/adapter_model.safetensors and
        folder/adapter_config.json."""
        _check(_L.fp8run_session_export_adapter(self._handle(), _path(folder)))

    def param_bytes(self):
        """Trained and frozen (LoRA base) parameters and their bytes where the session trains:
        a dict trained, trained_bytes, frozen, frozen_bytes."""
        pb = _lib.ParamBytes(struct_size=ctypes.sizeof(_lib.ParamBytes))
        _check(_L.fp8run_session_param_bytes(self._handle(), ctypes.byref(pb)))
        return {k: getattr(pb, k) for k in ("trained", "trained_bytes", "frozen", "frozen_bytes")}

    def load_safetensors(self, path, strict=False, strict_weights=False):
        """Load a safetensors checkpoint (a path or a Safetensors) into the trained parameters
        by name; returns a LoadReport (see Model.load_safetensors). A shape mismatch raises and
        loads nothing."""
        return _load_safetensors(_L.fp8run_session_load_safetensors, self._handle(), path, strict, strict_weights)

    def save_safetensors(self, folder, dtype="float32", max_shard_bytes=0):
        """Write the trained parameters as a Hugging Face checkpoint (see Model.save_safetensors)."""
        _check(_L.fp8run_session_save_safetensors(self._handle(), _path(folder), _st_dtype(dtype), max_shard_bytes))

    device = property(lambda self: _str(_L.fp8run_session_device(self._handle())))
    # which kernels ran the fused attention, and which GEMM algorithms were timed and kept
    attention = property(lambda self: _str(_L.fp8run_session_attention(self._handle())))
    gemm = property(lambda self: _str(_L.fp8run_session_gemm(self._handle())))

    def fp8_stats(self):
        """Per FP8 operand (x, w, dy of every fp8 Linear) as of the last step: a list of dicts
        (layer, operand, recipe, format, step, amax, scale, next_scale, history_max, updates,
        fp8_max, range_use, saturated, note); numbers the recipe does not have are None."""
        h = self._handle()
        n = ctypes.c_int()
        _check(_L.fp8run_session_fp8_stats(h, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            st = _lib.sized(_lib.Fp8Stat)
            _check(_L.fp8run_session_fp8_stat(h, i, ctypes.byref(st)))
            num = lambda v: None if v != v else v  # noqa: E731 (NaN: not available)
            out.append({"layer": _str(st.layer), "operand": _str(st.operand), "recipe": _str(st.recipe),
                        "format": _str(st.format), "step": st.step, "amax": num(st.amax) if st.has_amax else None,
                        "scale": num(st.scale) if st.has_scale else None, "next_scale": num(st.next_scale),
                        "history_max": num(st.history_max), "updates": st.updates, "fp8_max": st.fp8_max,
                        "range_use": num(st.range_use), "saturated": bool(st.saturated), "note": _str(st.note)})
        return out


# ---------------------------------------------------------------------------------------------
# data and checkpoints
# ---------------------------------------------------------------------------------------------

class DataLoader(_Handle):
    """Batches of B windows of T+1 token ids from a raw uint16/uint32/uint8 or llm.c token file.

    DataLoader(path, batch, seq, order="random"|"sequential", seed=0, token_dtype="uint16",
    vocab_size=0, validation_batches=None (a validation loader: sequential, that many batches
    per pass; 0 = the whole file), no_mmap=False, max_batches=0, format="auto"|"raw",
    packing=True (SFT token files: several examples per window; False: one, padded)).
    An SFT token file (prepare(..., sft=True)) gives its batches with next_sft()."""
    _destroy = "fp8run_data_close"

    def __init__(self, path, batch, seq, order="random", seed=0, token_dtype="uint16", vocab_size=0,
                 validation_batches=None, no_mmap=False, max_batches=0, format="auto", packing=True):
        super().__init__()
        c = _lib.DataConfig()
        _check(_L.fp8run_data_config_init(ctypes.byref(c), ctypes.sizeof(c)))
        c.batch, c.seq_len = batch, seq
        orders = {"random": 0, "sequential": 1}
        formats = {"auto": 0, "raw": 1}
        dtypes = {"uint16": _UINT16, "uint32": _UINT32, "uint8": _UINT8}
        for what, value, table in (("order", order, orders), ("format", format, formats),
                                   ("token_dtype", token_dtype, dtypes)):
            if value not in table:
                raise Error(ERR_INVALID_ARG, "%s %r: use one of %s" % (what, value, ", ".join(table)))
        c.order, c.format, c.token_dtype = orders[order], formats[format], dtypes[token_dtype]
        c.seed, c.vocab_size, c.no_mmap, c.max_batches = seed, vocab_size, int(bool(no_mmap)), max_batches
        c.no_packing = 0 if packing else 1
        h = ctypes.c_void_p()
        if validation_batches is None:
            _check(_L.fp8run_data_open(_path(path), ctypes.byref(c), ctypes.byref(h)))
        else:
            _check(_L.fp8run_data_open_val(_path(path), ctypes.byref(c), validation_batches, ctypes.byref(h)))
        self._h = h
        self.batch, self.seq_len = batch, seq

    def next(self, k=None, dtype=np.int64):
        """The next batch [B, T+1], or k batches [k, B, T+1] (one step's micro-batches)."""
        shape = (self.batch, self.seq_len + 1) if k is None else (k, self.batch, self.seq_len + 1)
        out = np.empty(shape, dtype=dtype)
        if out.dtype not in (np.int64, np.int32):
            raise TypeError("dtype must be int64 or int32")
        dt = _INT64 if out.dtype == np.int64 else _INT32
        _check(_L.fp8run_data_next(self._handle(), dt, out.ctypes.data, out.size))
        return out

    def next_sft(self, k=None):
        """An SFT file's next batch as (windows int64, segments int32, targets uint8, labels
        that count): arrays [B, T+1], or [k, B, T+1] for k micro-batches."""
        shape = (self.batch, self.seq_len + 1) if k is None else (k, self.batch, self.seq_len + 1)
        w, seg, tgt = np.empty(shape, np.int64), np.empty(shape, np.int32), np.empty(shape, np.uint8)
        n = ctypes.c_int64()
        _check(_L.fp8run_data_next_sft(self._handle(), w.ctypes.data, seg.ctypes.data, tgt.ctypes.data, w.size,
                                       ctypes.byref(n)))
        return w, seg, tgt, n.value

    is_sft = property(lambda self: bool(_L.fp8run_data_is_sft(self._handle())))

    @property
    def sft_info(self):
        """An SFT file's examples, windows, truncated, tokens, target_labels, eos, vocab and
        max_examples (the most examples a window holds: give it to a packed session as
        sft_max_examples, so that its GPU attention plans that many sequences a window) (dict)."""
        info = _lib.sized(_lib.SftInfo)
        _check(_L.fp8run_data_sft_info(self._handle(), ctypes.byref(info)))
        return {f: getattr(info, f) for f, _ in _lib.SftInfo._fields_[1:]}

    def reset(self):
        _L.fp8run_data_reset(self._handle())

    num_tokens = property(lambda self: _L.fp8run_data_num_tokens(self._handle()))
    epoch = property(lambda self: _L.fp8run_data_epoch(self._handle()))
    batches_done = property(lambda self: _L.fp8run_data_batches_done(self._handle()))
    batches_per_epoch = property(lambda self: _L.fp8run_data_batches_per_epoch(self._handle()))

    @property
    def state(self):
        """The position as bytes (restore by assigning them back)."""
        n = _L.fp8run_data_state_size()
        buf = ctypes.create_string_buffer(n)
        _check(_L.fp8run_data_get_state(self._handle(), buf, n))
        return buf.raw

    @state.setter
    def state(self, value):
        b = bytes(value)
        _check(_L.fp8run_data_set_state(self._handle(), b, len(b)))

    def check_tokens(self, vocab_size):
        _check(_L.fp8run_data_check_tokens(self._handle(), vocab_size))


def is_sft_file(path):
    """True when path is an SFT token file (prepare(..., sft=True))."""
    return bool(_L.fp8run_file_is_sft(_path(path)))


def is_checkpoint(path):
    return bool(_L.fp8run_is_checkpoint(_path(path)))


class Checkpoint(_Handle):
    """What a checkpoint file holds: .step, .config (dict), .model_path, .has_data_state,
    .parameters (TensorInfo list)."""
    _destroy = "fp8run_checkpoint_close"

    def __init__(self, path):
        super().__init__()
        h = ctypes.c_void_p()
        _check(_L.fp8run_checkpoint_open(_path(path), ctypes.byref(h)))
        self._h = h
        self.step = _L.fp8run_checkpoint_step(h)
        j = _str(_L.fp8run_checkpoint_config_json(h))
        self.config = json.loads(j) if j else None
        self.model_path = _str(_L.fp8run_checkpoint_model_path(h))
        self.has_data_state = bool(_L.fp8run_checkpoint_has_data_state(h))
        self.parameters = _infos(_L.fp8run_checkpoint_param_count, _L.fp8run_checkpoint_param, h)


# ---------------------------------------------------------------------------------------------
# safetensors checkpoints
# ---------------------------------------------------------------------------------------------

# nonfinite: {name: count of NaN/Inf values} for each loaded tensor that holds any
LoadReport = namedtuple("LoadReport", "matched missing unexpected nonfinite", defaults=({},))
_ST_DTYPES = {"float32": 1, "fp32": 1, "bfloat16": 16, "bf16": 16, "float16": 10, "fp16": 10}


def _st_dtype(dtype):
    if dtype not in _ST_DTYPES:
        raise Error(ERR_INVALID_ARG, "dtype '%s' is not one of float32, bfloat16, float16" % dtype)
    return _ST_DTYPES[dtype]


class Safetensors(_Handle):
    """A safetensors checkpoint: a .safetensors file, a folder with model.safetensors or a
    sharded model.safetensors.index.json, or the index. .tensors lists TensorInfo (stored
    dtype); read(name) gives float32 (FP8 weights with weight_scale_inv blocks dequantized)."""
    _destroy = "fp8run_safetensors_close"

    def __init__(self, path):
        super().__init__()
        h = ctypes.c_void_p()
        _check(_L.fp8run_safetensors_open(_path(path), ctypes.byref(h)))
        self._h = h

    @property
    def tensors(self):
        return _infos(_L.fp8run_safetensors_tensor_count, _L.fp8run_safetensors_tensor, self._handle())

    def read(self, name):
        for t in self.tensors:
            if t.name == name:
                out = np.empty(t.shape, dtype=np.float32)
                _check(_L.fp8run_safetensors_read(self._handle(), _bytes(name), out.ctypes.data, out.size))
                return out
        raise Error(ERR_INVALID_ARG, "no tensor '%s' in the checkpoint" % name)


def checkpoint_to_safetensors(ckpt, folder, dtype="float32", max_shard_bytes=0):
    """Write a training checkpoint's weights (the trained parameters, as the trainer names them)
    as a Hugging Face checkpoint in folder (see Model.save_safetensors)."""
    _check(_L.fp8run_checkpoint_save_safetensors(_path(ckpt), _path(folder), _st_dtype(dtype), max_shard_bytes))


_LOAD_STRICT, _LOAD_STRICT_WEIGHTS = 1, 2  # FP8RUN_LOAD_STRICT, FP8RUN_LOAD_STRICT_WEIGHTS


def _load_safetensors(fn, handle, path, strict, strict_weights=False):
    st = path if isinstance(path, Safetensors) else Safetensors(path)
    try:
        r = _lib.sized(_lib.LoadReport)
        flags = (_LOAD_STRICT if strict else 0) | (_LOAD_STRICT_WEIGHTS if strict_weights else 0)
        _check(fn(handle, st._handle(), flags, ctypes.byref(r)))
        names = lambda arr, n: [_str(arr[i]) for i in range(n)]
        bad = {_str(r.nonfinite[i]): int(r.nonfinite_counts[i]) for i in range(r.n_nonfinite)}
        return LoadReport(names(r.matched, r.n_matched), names(r.missing, r.n_missing),
                          names(r.unexpected, r.n_unexpected), bad)
    finally:
        if st is not path:
            st.close()


from ._user import plot, prepare, Progress, log_to_python, train, from_torch, sample, _state_dict  # noqa: E402,F401
