#!/usr/bin/env python3
# Writes tests/fixtures/bad/: small broken or hostile ONNX files for the loader's bad-input
# tests (each described in tests/fixtures/README.md). Needs the onnx and numpy packages.
#   python3 tools/gen_bad_fixtures.py tests/fixtures/bad
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)


def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    with open(os.path.join(out, name), "wb") as f:
        f.write(model.SerializeToString())


def mlp(name_w="w", w=None):
    w = w if w is not None else rng.standard_normal((4, 3)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("MatMul", ["x", name_w], ["y"], name="mm")
    g = helper.make_graph([node], "mlp", [x], [y], [numpy_helper.from_array(w, name_w)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


good = mlp()
raw = good.SerializeToString()
with open(os.path.join(out, "truncated.onnx"), "wb") as f:
    f.write(raw[: len(raw) // 2])
with open(os.path.join(out, "garbage.onnx"), "wb") as f:
    f.write(rng.integers(0, 256, 300, dtype=np.uint8).tobytes())

m = mlp()
m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-3]
save(m, "raw_data_wrong_length.onnx", check=False)

# Gather on a 10-row table; the input file holds index 12
table = rng.standard_normal((10, 4)).astype(np.float32)
idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
g = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["y"], name="embed", axis=0)], "gather",
                      [idx], [y], [numpy_helper.from_array(table, "table")])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "gather_oob.onnx")
np.save(os.path.join(out, "gather_oob_input.npy"), np.array([[1, 2, 3], [4, 12, 0]], dtype=np.int64))

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
y = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])
g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
                       helper.make_node("Add", ["a", "x"], ["b"], name="add_b")], "cycle", [x], [y])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "cycle.onnx", check=False)

g = helper.make_graph([helper.make_node("Add", ["x", "nobody_makes_this"], ["y"], name="add_dangling")],
                      "dangling", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "dangling_input.onnx", check=False)


def external(name, location, offset=None, length=None):
    m = mlp()
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", location
    if offset is not None:
        e = t.external_data.add(); e.key, e.value = "offset", str(offset)
    if length is not None:
        e = t.external_data.add(); e.key, e.value = "length", str(length)
    save(m, name, check=False)


w = rng.standard_normal((4, 3)).astype(np.float32)
with open(os.path.join(out, "extdata_ok.bin"), "wb") as f:
    f.write(b"\0" * 16 + w.tobytes())
external("extdata_ok.onnx", "extdata_ok.bin", 16, 48)
external("extdata_dotdot.onnx", "../secret.bin", 0, 48)
external("extdata_absolute.onnx", "/etc/passwd", 0, 48)
external("extdata_past_end.onnx", "extdata_ok.bin", 40, 48)

m = mlp()
t = m.graph.initializer[0]
del t.dims[:]
t.dims.extend([2 ** 40, 2 ** 40, 16])
save(m, "shape_overflow.onnx", check=False)

g = helper.make_graph([helper.make_node("FancyOp", ["x"], ["y"], name="fancy")], "unsupported", [x],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "unsupported_op.onnx", check=False)
print("wrote", sorted(os.listdir(out)))
