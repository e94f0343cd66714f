"""ctypes declarations of include/fp8run.h: the library, its structs and its functions.

The structs mirror the header field by field (TrainConfig is laid out from the library's option
table when it is loaded); each starts with struct_size, which this module
sets to ctypes.sizeof(the struct), so the library reads and writes only the fields known here
(the header's rule for callers built against an older version)."""
import ctypes
import ctypes.util
import os

ABI_VERSION = 1  # FP8RUN_ABI_VERSION this module was written for
MAX_RANK = 8

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
c_double = ctypes.c_double
c_void_p = ctypes.c_void_p


class ParamBytes(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("trained", c_int64), ("trained_bytes", c_int64),
                ("frozen", c_int64), ("frozen_bytes", c_int64)]


class ValueInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("dtype", c_int),
        ("rank", c_int),
        ("dims", c_int64 * MAX_RANK),
        ("dim_names", c_char_p * MAX_RANK),
        ("numel", c_int64),
    ]


class TrainConfig(ctypes.Structure):
    """fp8run_train_config. Its fields are not written here: load() lays them out from the
    library's own table (fp8run_train_config_option: name, type, offset and size of every field,
    runtime/train/train_config.def), so the struct always matches the library that is loaded, and
    checks every offset against the one the library reports."""


class OptionInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("type", c_int),
        ("offset", c_size_t),
        ("size", c_size_t),
        ("min", c_double),
        ("max", c_double),
        ("choices", ctypes.POINTER(c_char_p)),
        ("flag", c_char_p),
        ("metavar", c_char_p),
        ("commands", ctypes.c_uint),
        ("help", c_char_p),
    ]


# fp8run_option_type -> ctypes
_OPTION_CTYPES = [c_int, c_int64, c_uint64, c_double, c_char_p, c_char_p, c_int,
                  ctypes.POINTER(c_char_p), ctypes.POINTER(c_int64), c_void_p]
OPTION_STRING, OPTION_CHOICE = 4, 5
# the table as read by load(): dicts of name, type, help, flag, choices (a list or None)
TRAIN_CONFIG_OPTIONS = []


def _layout_train_config(lib):
    """TrainConfig._fields_ from the library's option table, checked field by field."""
    fields = [("struct_size", c_size_t)]
    infos = []
    for i in range(lib.fp8run_train_config_option_count()):
        info = OptionInfo()
        info.struct_size = ctypes.sizeof(info)
        if lib.fp8run_train_config_option(i, ctypes.byref(info)) != 0:
            raise OSError("fp8run: reading option %d of the library's table failed" % i)
        if not 0 <= info.type < len(_OPTION_CTYPES):
            raise OSError("fp8run: option %s has a type (%d) this package does not know" % (info.name, info.type))
        fields.append((info.name.decode(), _OPTION_CTYPES[info.type]))
        infos.append(info)
    TrainConfig._fields_ = fields
    for info in infos:
        name = info.name.decode()
        f = getattr(TrainConfig, name)
        if f.offset != info.offset or f.size != info.size:
            raise OSError("fp8run: fp8run_train_config.%s is at %d (%d bytes) in the library, at %d (%d) here"
                          % (name, info.offset, info.size, f.offset, f.size))
        choices = None
        if info.choices:
            choices = []
            while info.choices[len(choices)] is not None:
                choices.append(info.choices[len(choices)].decode())
        TRAIN_CONFIG_OPTIONS.append({"name": name, "type": info.type, "help": info.help.decode(),
                                     "flag": info.flag.decode() if info.flag else None, "choices": choices})


class LayerInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("precision", c_char_p),
        ("why", c_char_p),
        ("recipe", c_char_p),
        ("weights", c_char_p),
        ("sources", c_char_p),
        ("n_fused", c_int),
        ("has_bias", c_int),
        ("k", c_int64),
        ("n", c_int64),
        ("pad_multiple", c_int),
        ("pad_k", c_int64),
        ("pad_n", c_int64),
    ]


class SkippedInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("node", c_char_p),
        ("op_type", c_char_p),
        ("weight", c_char_p),
        ("reason", c_char_p),
    ]


class StepStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("step", c_int64),
        ("loss", c_double),
        ("grad_norm", c_double),
        ("lr", c_double),
        ("skipped", c_int),
        ("bad_in_a_row", c_int),
        ("reason", c_char_p),
        ("available", c_int),  # appended after 0.1.0
    ]


class DataConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("batch", c_int64),
        ("seq_len", c_int64),
        ("order", c_int),
        ("format", c_int),
        ("seed", c_uint64),
        ("token_dtype", c_int),
        ("no_mmap", c_int),
        ("vocab_size", c_int64),
        ("max_batches", c_int64),
        ("no_packing", c_int),  # appended after 0.1.0
    ]


class SftInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("examples", c_int64),
        ("windows", c_int64),
        ("truncated", c_int64),
        ("tokens", c_int64),
        ("target_labels", c_int64),
        ("eos", c_int64),
        ("vocab", c_int64),
        ("max_examples", c_int64),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("dtype", c_int),
        ("rank", c_int),
        ("dims", c_int64 * MAX_RANK),
        ("data", c_void_p),
        ("nbytes", c_size_t),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("producer_name", c_char_p),
        ("producer_version", c_char_p),
        ("graph_name", c_char_p),
        ("ir_version", c_int64),
        ("n_opsets", c_int),
        ("n_nodes", c_int),
        ("n_initializers", c_int),
        ("initializer_bytes", c_uint64),
        ("n_op_types", c_int),
        ("compiled", c_int),
    ]


class OpInfo(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("op_type", c_char_p), ("count", c_int)]


class PrepareConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dim_names", ctypes.POINTER(c_char_p)),
        ("dim_values", ctypes.POINTER(c_int64)),
        ("n_dims", c_int),
        ("input_names", ctypes.POINTER(c_char_p)),
        ("input_ranks", ctypes.POINTER(c_int)),
        ("input_dims", ctypes.POINTER(ctypes.POINTER(c_int64))),
        ("n_inputs", c_int),
    ]


class LlamaConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dim", c_int64),
        ("layers", c_int64),
        ("heads", c_int64),
        ("kv_heads", c_int64),
        ("ffn", c_int64),
        ("vocab", c_int64),
        ("max_seq", c_int64),
        ("seed", c_uint64),
    ]


class Fp8Stat(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("layer", c_char_p),
        ("operand", c_char_p),
        ("recipe", c_char_p),
        ("format", c_char_p),
        ("step", c_int64),
        ("has_amax", c_int),
        ("amax", c_double),
        ("has_scale", c_int),
        ("scale", c_double),
        ("next_scale", c_double),
        ("history_max", c_double),
        ("updates", c_int64),
        ("fp8_max", c_double),
        ("range_use", c_double),
        ("saturated", c_int),
        ("note", c_char_p),
    ]


def sized(cls):
    """A zeroed struct with struct_size set (for output structs)."""
    s = cls()
    s.struct_size = ctypes.sizeof(cls)
    return s


class LoadReport(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("n_matched", c_int),
        ("n_missing", c_int),
        ("n_unexpected", c_int),
        ("matched", ctypes.POINTER(c_char_p)),
        ("missing", ctypes.POINTER(c_char_p)),
        ("unexpected", ctypes.POINTER(c_char_p)),
        ("n_nonfinite", c_int),
        ("nonfinite", ctypes.POINTER(c_char_p)),
        ("nonfinite_counts", ctypes.POINTER(ctypes.c_int64)),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)

P = c_void_p  # every handle is opaque
PP = ctypes.POINTER(c_void_p)
_PROTOTYPES = {
    # version, errors, logging
    "fp8run_version": (c_char_p, []),
    "fp8run_abi_version": (c_int, []),
    "fp8run_status_name": (c_char_p, [c_int]),
    "fp8run_last_error": (c_char_p, []),
    "fp8run_set_log_callback": (None, [LOG_FN, c_void_p, c_int]),
    "fp8run_dtype_name": (c_char_p, [c_int]),
    # models
    "fp8run_model_load": (c_int, [c_char_p, PP]),
    "fp8run_model_load_buffer": (c_int, [c_void_p, c_size_t, c_char_p, PP]),
    "fp8run_model_destroy": (None, [P]),
    "fp8run_model_error": (c_char_p, [P]),
    "fp8run_model_path": (c_char_p, [P]),
    "fp8run_model_input_count": (c_int, [P]),
    "fp8run_model_input": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    "fp8run_model_output_count": (c_int, [P]),
    "fp8run_model_output": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    "fp8run_model_param_count": (c_int, [P]),
    "fp8run_model_param_elements": (c_int64, [P]),
    "fp8run_model_nonfinite_params": (c_int, [P]),
    "fp8run_model_nonfinite_param": (c_char_p, [P, c_int, ctypes.POINTER(ctypes.c_int64)]),
    "fp8run_model_param": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    "fp8run_model_get_param": (c_int, [P, c_char_p, c_void_p, c_size_t]),
    "fp8run_model_set_param": (c_int, [P, c_char_p, c_void_p, c_size_t]),
    "fp8run_model_apply_checkpoint": (c_int, [P, c_char_p, ctypes.POINTER(c_int)]),
    "fp8run_model_save": (c_int, [P, c_char_p]),
    "fp8run_model_export": (c_int, [P, c_char_p]),
    "fp8run_model_get_info": (c_int, [P, ctypes.POINTER(ModelInfo)]),
    "fp8run_model_opset": (c_int, [P, c_int, ctypes.POINTER(c_char_p), ctypes.POINTER(c_int64)]),
    "fp8run_model_op": (c_int, [P, c_int, ctypes.POINTER(OpInfo)]),
    "fp8run_model_compiled_for": (c_int, [P, ctypes.POINTER(c_int64), ctypes.POINTER(c_int64),
                                          ctypes.POINTER(c_char_p)]),
    "fp8run_model_report": (c_int, [P, PP]),
    "fp8run_model_write_compiled": (c_int, [P, ctypes.POINTER(TrainConfig), c_char_p, PP]),
    # preparation, the forward pass, generated models, tensors
    "fp8run_prepare_config_init": (c_int, [ctypes.POINTER(PrepareConfig), c_size_t]),
    "fp8run_forward_create": (c_int, [P, ctypes.POINTER(PrepareConfig), PP]),
    "fp8run_forward_destroy": (None, [P]),
    "fp8run_forward_set_input": (c_int, [P, ctypes.POINTER(Tensor)]),
    "fp8run_forward_run": (c_int, [P]),
    "fp8run_forward_output_count": (c_int, [P]),
    "fp8run_forward_output": (c_int, [P, c_int, ctypes.POINTER(Tensor)]),
    "fp8run_llama_config_init": (c_int, [ctypes.POINTER(LlamaConfig), c_size_t]),
    "fp8run_llama_config_preset": (c_int, [ctypes.POINTER(LlamaConfig), c_char_p]),
    "fp8run_model_generate_llama": (c_int, [ctypes.POINTER(LlamaConfig), PP]),
    "fp8run_convert_to_float32": (c_int, [c_int, c_void_p, c_size_t, c_void_p]),
    # config and reports
    "fp8run_train_config_init": (c_int, [ctypes.POINTER(TrainConfig), c_size_t]),
    "fp8run_train_config_option_count": (c_int, []),
    "fp8run_train_config_option": (c_int, [c_int, ctypes.POINTER(OptionInfo)]),
    "fp8run_model_compile": (c_int, [P, ctypes.POINTER(TrainConfig), PP]),
    "fp8run_report_destroy": (None, [P]),
    "fp8run_report_precision": (c_char_p, [P]),
    "fp8run_report_layer_count": (c_int, [P]),
    "fp8run_report_layer": (c_int, [P, c_int, ctypes.POINTER(LayerInfo)]),
    "fp8run_report_skipped_count": (c_int, [P]),
    "fp8run_report_skipped": (c_int, [P, c_int, ctypes.POINTER(SkippedInfo)]),
    "fp8run_report_linears": (c_int, [P, c_char_p]),
    "fp8run_report_text": (c_char_p, [P]),
    # sessions
    "fp8run_session_create": (c_int, [P, c_char_p, ctypes.POINTER(TrainConfig), PP]),
    "fp8run_session_destroy": (None, [P]),
    "fp8run_session_error": (c_char_p, [P]),
    "fp8run_session_backend": (c_char_p, [P]),
    "fp8run_session_train_step": (c_int, [P, c_void_p, c_int, c_size_t, ctypes.POINTER(StepStats)]),
    "fp8run_session_train_step_async": (c_int, [P, c_void_p, c_int, c_size_t, ctypes.POINTER(c_int64)]),
    "fp8run_session_poll_stats": (c_int, [P, c_int, ctypes.POINTER(StepStats)]),
    "fp8run_session_steps_queued": (c_int, [P]),
    "fp8run_session_eval": (c_int, [P, c_void_p, c_int, c_size_t, ctypes.POINTER(c_double)]),
    "fp8run_session_train_step_sft": (c_int, [P, c_void_p, c_void_p, c_void_p, c_size_t, ctypes.POINTER(StepStats)]),
    "fp8run_session_eval_sft": (c_int, [P, c_void_p, c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_double),
                                        ctypes.POINTER(c_int64)]),
    "fp8run_session_sft_positions": (c_int, [P]),
    "fp8run_session_eval_output": (c_int, [P, c_char_p, ctypes.POINTER(ValueInfo), c_void_p, c_size_t]),
    "fp8run_session_batch": (c_int64, [P]),
    "fp8run_session_seq_len": (c_int64, [P]),
    "fp8run_session_grad_accum": (c_int, [P]),
    "fp8run_session_vocab": (c_int64, [P]),
    "fp8run_session_steps_done": (c_int64, [P]),
    "fp8run_session_steps_skipped": (c_int64, [P]),
    "fp8run_session_config_json": (c_char_p, [P]),
    "fp8run_session_report": (c_int, [P, PP]),
    "fp8run_session_param_count": (c_int, [P]),
    "fp8run_session_param": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    "fp8run_session_get_param": (c_int, [P, c_char_p, c_void_p, c_size_t]),
    "fp8run_session_set_param": (c_int, [P, c_char_p, c_void_p, c_size_t]),
    "fp8run_session_save": (c_int, [P, c_char_p, P]),
    "fp8run_session_load": (c_int, [P, c_char_p, P]),
    "fp8run_session_export": (c_int, [P, c_char_p]),
    "fp8run_session_export_adapter": (c_int, [P, c_char_p]),
    "fp8run_session_param_bytes": (c_int, [P, ctypes.POINTER(ParamBytes)]),
    "fp8run_session_device": (c_char_p, [P]),
    "fp8run_session_attention": (c_char_p, [P]),
    "fp8run_session_gemm": (c_char_p, [P]),
    "fp8run_session_fp8_stats": (c_int, [P, ctypes.POINTER(c_int)]),
    "fp8run_session_fp8_stat": (c_int, [P, c_int, ctypes.POINTER(Fp8Stat)]),
    # checkpoints
    "fp8run_is_checkpoint": (c_int, [c_char_p]),
    "fp8run_checkpoint_open": (c_int, [c_char_p, PP]),
    "fp8run_checkpoint_close": (None, [P]),
    "fp8run_checkpoint_step": (c_int64, [P]),
    "fp8run_checkpoint_config_json": (c_char_p, [P]),
    "fp8run_checkpoint_model_path": (c_char_p, [P]),
    "fp8run_checkpoint_has_data_state": (c_int, [P]),
    "fp8run_checkpoint_param_count": (c_int, [P]),
    "fp8run_checkpoint_param": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    # safetensors checkpoints
    "fp8run_safetensors_open": (c_int, [c_char_p, PP]),
    "fp8run_safetensors_close": (None, [P]),
    "fp8run_safetensors_error": (c_char_p, [P]),
    "fp8run_safetensors_tensor_count": (c_int, [P]),
    "fp8run_safetensors_tensor": (c_int, [P, c_int, ctypes.POINTER(ValueInfo)]),
    "fp8run_safetensors_read": (c_int, [P, c_char_p, c_void_p, c_size_t]),
    "fp8run_session_load_safetensors": (c_int, [P, P, c_int, ctypes.POINTER(LoadReport)]),
    "fp8run_model_load_safetensors": (c_int, [P, P, c_int, ctypes.POINTER(LoadReport)]),
    "fp8run_model_save_safetensors": (c_int, [P, c_char_p, c_int, c_uint64]),
    "fp8run_session_save_safetensors": (c_int, [P, c_char_p, c_int, c_uint64]),
    "fp8run_checkpoint_save_safetensors": (c_int, [c_char_p, c_char_p, c_int, c_uint64]),
    # data loader
    "fp8run_data_config_init": (c_int, [ctypes.POINTER(DataConfig), c_size_t]),
    "fp8run_data_open": (c_int, [c_char_p, ctypes.POINTER(DataConfig), PP]),
    "fp8run_data_open_val": (c_int, [c_char_p, ctypes.POINTER(DataConfig), c_int64, PP]),
    "fp8run_data_close": (None, [P]),
    "fp8run_data_error": (c_char_p, [P]),
    "fp8run_data_next": (c_int, [P, c_int, c_void_p, c_size_t]),
    "fp8run_data_is_sft": (c_int, [P]),
    "fp8run_file_is_sft": (c_int, [c_char_p]),
    "fp8run_data_sft_info": (c_int, [P, ctypes.POINTER(SftInfo)]),
    "fp8run_data_next_sft": (c_int, [P, c_void_p, c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_int64)]),
    "fp8run_data_reset": (None, [P]),
    "fp8run_data_num_tokens": (c_int64, [P]),
    "fp8run_data_token_dtype": (c_int, [P]),
    "fp8run_data_batches_done": (c_int64, [P]),
    "fp8run_data_epoch": (c_int64, [P]),
    "fp8run_data_batches_per_epoch": (c_int64, [P]),
    "fp8run_data_check_tokens": (c_int, [P, c_int64]),
    "fp8run_data_state_size": (c_size_t, []),
    "fp8run_data_get_state": (c_int, [P, c_void_p, c_size_t]),
    "fp8run_data_set_state": (c_int, [P, c_void_p, c_size_t]),
}


def _candidates():
    env = os.environ.get("FP8RUN_LIBRARY")
    if env:
        return [env]  # explicit: nothing else is tried
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    out = [os.path.join(here, "libfp8run.so"), os.path.join(repo, "build", "libfp8run.so")]
    found = ctypes.util.find_library("fp8run")
    if found:
        out.append(found)
    return out


def load():
    """Open libfp8run.so: $FP8RUN_LIBRARY, else next to this package, else the repository's
    build/ folder, else the system's library path. Declares every function."""
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    else:
        raise OSError("fp8run: cannot load libfp8run.so; tried: " + "; ".join(tried) +
                      ". Build it (cmake) or set FP8RUN_LIBRARY to its path.")
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    abi = lib.fp8run_abi_version()
    if abi != ABI_VERSION:
        raise OSError("fp8run: %s has ABI version %d; this Python package speaks %d" % (path, abi, ABI_VERSION))
    if not TRAIN_CONFIG_OPTIONS:
        _layout_train_config(lib)
    lib.path = path
    return lib
