"""Small datasets written by the tests: IDX image/label files and llm.c token files."""
import gzip
import struct

import numpy as np


def write_idx(path, array, compress=False):
    """Writes a uint8 array as an IDX file (magic 0x0803 for 3-D images, 0x0801 for labels)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    data = header + array.tobytes()
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(data)


def write_image_set(directory, n_train=512, n_val=128, side=16, classes=10, seed=0):
    """A learnable image classification set: each class has its own mean image.
    Returns the "data" section of a spec for it."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(40, 215, size=(classes, side, side))

    def make(n):
        labels = rng.integers(0, classes, size=n)
        images = means[labels] + rng.normal(0, 40, size=(n, side, side))
        return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.uint8)

    paths = {}
    for split, n in (("train", n_train), ("val", n_val)):
        images, labels = make(n)
        paths[split] = {"images": str(directory / f"{split}-images.idx.gz"),
                        "labels": str(directory / f"{split}-labels.idx")}
        write_idx(paths[split]["images"], images, compress=True)
        write_idx(paths[split]["labels"], labels)
    return {"format": "idx", "train": paths["train"], "val": paths["val"]}


def write_tokens_u16(path, tokens):
    """llm.c's token file: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    tokens = np.asarray(tokens, dtype=np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def read_safetensors(path):
    """Tensors and metadata of a safetensors file, without the safetensors package."""
    import json
    buf = open(path, "rb").read()
    n, = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": "<f4", "I64": "<i8", "U8": "u1", "I8": "i1"}
    tensors = {name: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtypes[v["dtype"]])
               .reshape(v["shape"]) for name, v in header.items()}
    return tensors, meta
