"""The nodes a RoI node's counts or batch indices are computed from, run apart: how
``graph/inputs.py`` chooses a graph input whose value reaches a RoI node through other nodes
(paddle2onnx's Unsqueeze / Add / Squeeze of ``boxes_num``, batch indices computed from counts),
and the rule such values must keep there.

Counts [N] must be >= 0 and sum to R, the rows of the node's boxes; batch indices [R] must
each be an image of the batch, in [0, N).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..errors import first_line
from ..ops import form
from .toolkit import GraphIndex, ancestors, reads

#: The most entries of an input ``linear`` probes one unit vector at a time.
LINEAR_MAX = 1024


def dims(vi: onnx.ValueInfoProto) -> list | None:
    """The declared sizes of a value (None: open), or None where it declares no shape."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]


def per_image(r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """r boxes over n images, in order and as even as can be: the count of each image and
    the image of each box."""
    counts = np.full(n, r // n, np.int64)
    counts[: r % n] += 1
    return counts, np.repeat(np.arange(n), counts)


def why_invalid(kind: str, y: np.ndarray, n: int | None, r: int | None) -> str | None:
    """Why counts (``kind`` "counts": [N], >= 0, summing to R) or batch indices ("batch":
    [R], each in [0, N)) are not valid for N images and R boxes (None: unknown, not
    checked), or None where they are."""
    if kind == "counts":
        if y.ndim != 1 or (n is not None and y.shape[0] != n):
            return f"has shape {list(y.shape)}, not [N] = [{n}] (one count per image)"
        if (y < 0).any() or (r is not None and int(y.sum()) != r):
            return f"is {y.tolist()[:8]}, which does not sum to R = {r} (the rows of the boxes)"
        return None
    if y.ndim != 1 or (r is not None and y.shape[0] != r):
        return f"has shape {list(y.shape)}, not [R] = [{r}] (one row per box)"
    if n is not None and ((y < 0) | (y >= n)).any():
        return f"is {y.tolist()[:8]}, not each an image of the batch, in [0, N) = [0, {n})"
    return None


def cone(g: GraphIndex, names: list[str]) -> list[onnx.NodeProto] | None:
    """The nodes ``names`` are computed from, in graph order; None where a RoI node is among
    them (the model computes them, not the graph inputs alone)."""
    nodes = [g.graph.node[i] for i in sorted(ancestors(g, names))]
    return None if any(form(x.domain, x.op_type) for x in nodes) else nodes


def sources(nodes: list[onnx.NodeProto], inputs: set[str]) -> list[str]:
    """The graph inputs (of ``inputs``) the nodes read, in the order they first read them."""
    return [x for x in dict.fromkeys(x for n in nodes for x in reads(n)) if x in inputs]


def runner(model: onnx.ModelProto, nodes: list[onnx.NodeProto],
           inputs: list[onnx.ValueInfoProto], outputs: list[str]
           ) -> Callable[[dict], list[np.ndarray]] | None:
    """feed -> the values of ``outputs``, computed by ``nodes`` alone in a plain onnxruntime
    session; None where onnxruntime cannot run them apart (a custom op)."""
    read = {x for n in nodes for x in reads(n)}
    g = helper.make_graph(nodes, "cone", inputs, [onnx.ValueInfoProto(name=o) for o in outputs],
                          [t for t in model.graph.initializer if t.name in read])
    m = helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version,
                          functions=model.functions)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - not runnable apart: the run's values are checked after
        return None
    names = [i.name for i in sess.get_inputs()]
    return lambda feed: sess.run(None, {k: feed[k] for k in names})


def why_no_value_fits(run: Callable[[dict], np.ndarray], feed: dict, vi: onnx.ValueInfoProto,
                      kind: str, n: int, r: int, check: Callable[[np.ndarray], str | None]
                      ) -> str | None:
    """Set ``feed[vi.name]`` to a value whose result through ``run`` passes ``check``: a
    candidate (``_candidates``), else the value ``linear`` solves for nodes linear in it.

    Returns:
        None once a value fits (``feed`` holds it); else why the first candidate (the counts
        or batch indices themselves) failed.
    """
    whys = [f"its declared shape {dims(vi)} holds no candidate"]
    if _candidates(run, feed, vi, kind, n, r, check, whys) or _solved(run, feed, vi, kind, n,
                                                                      r, check, whys):
        return None
    return whys[min(1, len(whys) - 1)]


def _candidates(run: Callable[[dict], np.ndarray], feed: dict, vi: onnx.ValueInfoProto,
                kind: str, n: int, r: int, check: Callable[[np.ndarray], str | None],
                whys: list[str]) -> bool:
    """Try the counts and the batch indices of r boxes over n images (``kind`` first), shaped
    as ``vi`` declares, each also corrected by what the nodes added to it (x + (want -
    run(x))): True once one passes ``check`` (set in ``feed``); why each failed added to
    ``whys``."""
    dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    want = dict(zip(("counts", "batch"), per_image(r, n)))
    for base in (want[kind], want["batch" if kind == "counts" else "counts"]):
        shape = fitting_shape(dims(vi), base.size)
        if shape is None:
            continue
        x = base.reshape(shape).astype(dtype)
        for _ in range(2):
            feed[vi.name] = x
            try:
                y = run(feed)
            except Exception as e:  # noqa: BLE001 - onnxruntime refused the candidate
                whys.append(f"with {vi.name} = {x.tolist()[:8]}: {first_line(e)}")
                break
            bad = check(y)
            if bad is None:
                return True
            whys.append(f"with {vi.name} = {x.tolist()[:8]}, it {bad}")
            if y.size != want[kind].size or x.size != y.size:
                break
            x = (x + (want[kind] - y.ravel()).reshape(x.shape)).astype(dtype)
    return False


def _solved(run: Callable[[dict], np.ndarray], feed: dict, vi: onnx.ValueInfoProto, kind: str,
            n: int, r: int, check: Callable[[np.ndarray], str | None], whys: list[str]) -> bool:
    """Try the value ``linear`` solves for: True once it passes ``check`` (set in ``feed``);
    why it failed added to ``whys``."""
    try:
        x = linear(lambda f: np.asarray(run(f)).ravel().astype(np.float64), feed, vi, kind, n, r)
        if x is None:
            return False
        feed[vi.name] = x
        bad = check(run(feed))
        if bad is None:
            return True
        whys.append(f"with {vi.name} = {x.tolist()[:8]}, it {bad}")
    except Exception as e:  # noqa: BLE001 - onnxruntime refused a probe
        whys.append(f"probing it: {first_line(e)}")
    return False


def linear(run: Callable[[dict], np.ndarray], feed: dict, vi: onnx.ValueInfoProto, kind: str,
           n: int, r: int) -> np.ndarray | None:
    """The value of input ``vi`` for nodes linear in it (y = A x + b: Add, Mul by constants,
    Concat with constants, Gather, reshapes; y's size a * size(x) + k): the size that gives
    y N entries (counts) or R (batch indices), A and b probed on zeros and unit vectors, and
    the entries of y that x reaches set to the counts of what the constant ones leave of the
    R boxes (or to batch indices), solved by least squares and rounded. None where y's size
    does not grow with x's or no such size exists (the caller checks the value found)."""
    dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)

    def zeros(m: int) -> np.ndarray | None:
        shape = fitting_shape(dims(vi), m)
        return np.zeros(shape, dtype) if shape is not None else None

    def at(x: np.ndarray) -> np.ndarray:
        feed[vi.name] = x
        return run(feed)

    one, two = zeros(1), zeros(2)
    if one is None or two is None:
        return None
    a, size1 = at(two).size - at(one).size, at(one).size
    want = n if kind == "counts" else r
    m = (want - size1 + a) // a if a > 0 and (want - size1 + a) % a == 0 else 0
    if not 1 <= m <= LINEAR_MAX or zeros(m) is None:
        return None
    z = zeros(m)
    b = at(z)
    units = [z.copy() for _ in range(m)]
    for i, u in enumerate(units):
        u.flat[i] = 1
    A = np.stack([at(u) - b for u in units], 1)
    reached = np.abs(A).sum(1) > 0
    t = b.copy()
    if kind == "counts":
        rest = r - int(b[~reached].sum())
        if rest < 0 or not reached.any():
            return None
        t[reached] = per_image(rest, int(reached.sum()))[0]
    else:
        t[reached] = per_image(int(reached.sum()), n)[1]
    x = np.linalg.lstsq(A[reached], (t - b)[reached], rcond=None)[0]
    return np.rint(x).astype(dtype).reshape(z.shape)


def fitting_shape(d: list | None, size: int) -> tuple[int, ...] | None:
    """The shape of ``size`` elements that declared sizes ``d`` allow (open sizes 1 but the
    last), or None where none does."""
    if d is None:
        return (size,)
    open_ = [i for i, v in enumerate(d) if v is None]
    fixed = int(np.prod([v for v in d if v is not None]))
    if not open_:
        return tuple(d) if fixed == size else None
    if fixed == 0 or size % fixed:
        return None
    shape = [1 if v is None else v for v in d]
    shape[open_[-1]] = size // fixed
    return tuple(shape)
