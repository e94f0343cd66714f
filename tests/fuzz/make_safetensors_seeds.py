#!/usr/bin/env python3
"""Write the seed corpus of tests/fuzz/fuzz_safetensors.c (tests/fuzz/corpus/safetensors):
small valid files of every dtype family fp8run reads, FP8 weights with 128x128 block scales
(weight_scale_inv) and a sharded set (index JSON and shards joined by the target's separator).
Deterministic: rerunning it rewrites the same bytes. Regression seeds of fixed crashes are kept
in the same folder under names of their own (not written here)."""
import json
import os
import struct
import sys

SEP = b"\n#shard#\n"  # as fuzz_safetensors.c
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1,
         "F8_E4M3": 1, "F8_E5M2": 1}


def payload(dtype, n, salt):
    """n elements of dtype, finite and varied (a fixed pattern, no randomness)."""
    out = bytearray()
    for i in range(n):
        v = ((i * 37 + salt * 11) % 29 - 14) / 8.0
        if dtype == "F64":
            out += struct.pack("<d", v)
        elif dtype == "F32":
            out += struct.pack("<f", v)
        elif dtype == "F16":
            out += struct.pack("<e", v)
        elif dtype == "BF16":
            out += struct.pack("<f", v)[2:]
        elif dtype in ("F8_E4M3", "F8_E5M2"):
            out.append((i * 29 + salt) % 0x7E)  # below the NaN codes in both formats
        elif dtype == "BOOL":
            out.append(i & 1)
        else:
            out += (i + salt).to_bytes(SIZES[dtype], "little", signed=True)
    return bytes(out)


def safetensors(tensors, meta=None):
    """tensors: [(name, dtype, shape)]; the header padded with spaces to 8 bytes."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for k, (name, dtype, shape) in enumerate(tensors):
        n = 1
        for d in shape:
            n *= d
        blob = payload(dtype, n, k)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "safetensors")
    os.makedirs(out, exist_ok=True)
    files = {
        "f32.safetensors": safetensors([("b.weight", "F32", [2, 3]), ("a.bias", "F32", [3]),
                                        ("scalar", "F32", [])], {"format": "pt"}),
        "dtypes.safetensors": safetensors([("w.bf16", "BF16", [4, 4]), ("w.f16", "F16", [3]),
                                           ("w.f64", "F64", [2]), ("ids", "I64", [2]), ("mask", "BOOL", [3]),
                                           ("bytes", "U8", [2]), ("empty", "F32", [0, 5])]),
        "fp8_block_scales.safetensors": safetensors([
            ("l.weight", "F8_E4M3", [130, 6]), ("l.weight_scale_inv", "F32", [2, 1]),
            ("m.weight", "F8_E4M3", [3, 129]), ("m.weight_scale_inv", "BF16", [1, 2]),
            ("n.weight", "F8_E5M2", [2, 2]),
            ("o.weight", "F8_E4M3", [2, 2]), ("o.weight_scale", "F32", [])], {"format": "pt"}),
    }
    s1 = safetensors([("l.weight", "F8_E4M3", [129, 3]), ("e.weight", "BF16", [3, 2])], {"format": "pt"})
    s2 = safetensors([("l.weight_scale_inv", "F32", [2, 1]), ("norm", "F16", [3])], {"format": "pt"})
    index = {"metadata": {"total_size": 0},
             "weight_map": {"l.weight": "s1.safetensors", "e.weight": "s1.safetensors",
                            "l.weight_scale_inv": "s2.safetensors", "norm": "s2.safetensors"}}
    files["sharded.set"] = json.dumps(index, separators=(",", ":")).encode() + SEP + s1 + SEP + s2
    for name, blob in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
