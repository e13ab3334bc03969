"""Model files in plain words: ``read_model`` says "no such file", "a folder", "empty" or "not
an ONNX model" before any parser's message, and ``write_model`` names the output path that
cannot be written and why. ``ort-roi validate``, ``info`` and ``convert`` read and write
through them, so the three say the same thing about the same file."""

from __future__ import annotations

import os

import onnx
from google.protobuf.message import DecodeError


class ModelFileError(ValueError):
    """A model file that cannot be read, or an output path that cannot be written; the
    message names the path and says why in plain words."""


def read_model(path: str | os.PathLike, load_external_data: bool = True) -> onnx.ModelProto:
    """Read an ONNX model from ``path``, or say in plain words why it cannot be.

    Args:
        path: the file.
        load_external_data: read the weights a model keeps in other files (onnx.load's
            argument of that name).

    Returns:
        the model.

    Raises:
        ModelFileError: no such file, a folder, an empty file, a file that is not an ONNX
            model (another kind of file, a truncated or corrupt one) or a model without a
            graph; the message names the path.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise ModelFileError(f"{p}: no such file")
    if os.path.isdir(p):
        raise ModelFileError(f"{p}: a folder, not a model file")
    if os.path.getsize(p) == 0:
        raise ModelFileError(f"{p}: an empty file (0 bytes), not an ONNX model")
    try:
        model = onnx.load(p, load_external_data=load_external_data)
    except (DecodeError, RuntimeWarning, UnicodeDecodeError) as e:
        raise ModelFileError(f"{p}: not an ONNX model (the file is not an ONNX protobuf, or it "
                             f"is truncated: {_short(e)})") from None
    except OSError as e:
        raise ModelFileError(f"{p}: cannot be read ({e.strerror or _short(e)})") from None
    except Exception as e:  # noqa: BLE001 - onnx's own errors (external data) name the file
        raise ModelFileError(f"{p}: cannot be read as an ONNX model ({_short(e)})") from None
    if not model.HasField("graph") or not model.graph.node and not model.graph.output:
        raise ModelFileError(f"{p}: not an ONNX model (it parses, but holds no graph: a file "
                             f"of another kind)")
    return model


def write_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` (weights over 2 GB in a file beside it, as onnx does).

    Args:
        model: the model.
        path: the output file.

    Raises:
        ModelFileError: the output path cannot be written (its folder is missing, is a file,
            or is not writable; the path is a folder); the message says it is the output.
    """
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    if os.path.isdir(p):
        raise ModelFileError(f"cannot write the output {p}: it is a folder")
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "does not exist"
        raise ModelFileError(f"cannot write the output {p}: its folder {folder} {what}")
    try:
        large = model.ByteSize() > 2**31 - 1
    except Exception:  # noqa: BLE001 - protobuf refuses to size a message over 2 GB
        large = True
    try:
        if large:
            onnx.save(model, p, save_as_external_data=True,
                      location=os.path.basename(p) + ".data")
        else:
            onnx.save(model, p)
    except OSError as e:
        raise ModelFileError(f"cannot write the output {p}: {e.strerror or _short(e)}") from None


def _short(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
