"""A safetensors writer and reader in plain numpy (format: docs/trainer.md,
"Checkpoints"), so the tests need no safetensors package.

8 bytes of header length N (u64 little-endian), N bytes of JSON padded with
spaces to a multiple of 8, then the tensors' raw little-endian bytes in the
order the header lists them.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1", "I8": "i1"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def write(path, tensors, metadata=None):
    """Writes {name: ndarray} (and {str: str} metadata) to path."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.asarray(a)
        data = np.ascontiguousarray(a, dtype=np.dtype(_DTYPES[_NAMES[a.dtype]])).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    """Returns ({name: ndarray}, metadata) from the safetensors file at path."""
    with open(path, "rb") as f:
        buf = f.read()
    n, = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], _DTYPES[e["dtype"]]).reshape(e["shape"])
    return tensors, meta
