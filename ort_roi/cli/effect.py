"""What ``ort-roi convert`` changes in a graph a plain session already runs, measured: the
original and the converted graph run on the same inputs in plain sessions, their outputs
compared and their runs timed side by side (``convert_effect``; ``ort-roi validate`` reports
it). What convert changes is told by the rewrite itself (``Rewrite.repairs``: an exporter's
form given its framework's arithmetic); how much that changes the numbers, and how much
faster the converted graph runs, is measured here on the inputs given. Where the outputs
differ though no repair was made, every rewritten node is judged on the inputs the original
graph fed it (``trace``): a difference there is a defect of ort_roi's; rounding there that the
graph's later selections (TopK, NonMaxSuppression, a comparison) turned into other picks is
not, and is said to be rounding, only where every rewritten node was judged."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx

from ..errors import first_line
from ..graph.nodes import iter_nodes
from ..graph.rewrite import Rewrite
from ..spec import DOMAIN
from .bench_timing import time_together
from .compare import ATOL, RTOL, OpErrors, plain_session, run_exposing, run_plain

#: Timed rounds of each graph (after one untimed run of each), interleaved: at most ROUNDS,
#: fewer where the two runs take longer than BUDGET_S seconds together (at least one: the
#: first run pays for the sessions' setup, which a measure of seconds would hold).
ROUNDS = 5
BUDGET_S = 2.0
#: A rewritten node's output agrees with the original graph's to rounding where their largest
#: |difference| is at most this fraction of the largest |value| (float32's eps is 1.2e-7: the
#: same sums in another order differ by a few eps of the values summed).
ROUNDING = 1e-5
#: Ops whose outputs jump when a rounding-level change of their inputs crosses a tie or a
#: threshold: a graph's picks (detections, levels) may differ from such rounding alone.
SELECTIONS = ("TopK", "NonMaxSuppression", "ArgMax", "ArgMin", "NonZero", "Greater", "Less",
              "GreaterOrEqual", "LessOrEqual", "Floor", "Ceil", "Round")


@dataclass
class Effect:
    """What convert changes, measured on one set of inputs.

    ``rewrite``: what the rewrite did (``moved``, ``repairs``, ``notes``); ``differs``: one
    line per graph output whose values (or shape) differ between the original and the
    converted graph beyond ATOL + RTOL x |value|; ``max_diff``: the largest |difference| over
    the float outputs of equal shape; ``native_s`` / ``converted_s``: median seconds per run
    over ``rounds`` interleaved rounds;
    ``error``: why the comparison could not be made (the converted graph failed to run);
    ``at_rewrite`` / ``rounding`` / ``untraced``: where outputs differ without a repair,
    ``trace``'s findings (the rewritten nodes whose outputs differ beyond rounding on what
    the original graph fed them; the words saying every one agrees to rounding; the nodes it
    could not judge, with why).
    """

    rewrite: Rewrite
    differs: list[str] = field(default_factory=list)
    max_diff: float = 0.0
    native_s: float | None = None
    converted_s: float | None = None
    rounds: int = 0
    error: str | None = None
    at_rewrite: list[str] = field(default_factory=list)
    rounding: str | None = None
    untraced: list[str] = field(default_factory=list)

    @property
    def defect(self) -> bool:
        """Whether what convert makes of the graph failed, or computes otherwise without a
        repair and ``trace`` did not clear every rewritten node (it named one, or could not
        judge them all): never an OK."""
        return self.error is not None or bool(
            self.differs and not self.rewrite.repairs and self.rounding is None)

    @property
    def speedup(self) -> float | None:
        if not self.native_s or not self.converted_s:
            return None
        return self.native_s / self.converted_s


def _diff(name: str, a: np.ndarray, b: np.ndarray) -> tuple[str | None, float]:
    """Whether output ``name`` differs (a line saying how) and its largest |difference|."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"{name}: shape {list(a.shape)} here, {list(b.shape)} converted", 0.0
    if a.size == 0:
        return None, 0.0
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        n = int(np.count_nonzero(a != b))
        return (f"{name}: {n} of {a.size} values differ" if n else None), 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: compared by equality below
        d = np.abs(a64 - b64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    d = np.where(same, 0.0, d)
    worst = float(np.nanmax(np.where(np.isnan(d), np.inf, d)))
    bad = ~same & ~(d <= ATOL + RTOL * np.abs(b64))
    if bad.any():
        return (f"{name}: {int(bad.sum())} of {a.size} values differ, by up to "
                f"{worst:.3g}"), worst
    return None, worst


def convert_effect(model: onnx.ModelProto, converted: onnx.ModelProto, done: Rewrite,
                   feed: dict[str, np.ndarray], rounds: int = ROUNDS,
                   progress: Callable[[str], None] | None = None) -> Effect:
    """Run ``model`` and ``converted`` (what ``rewrite`` made of it, ``done``) on ``feed`` in
    plain sessions with ort_roi's ops, compare every graph output and time both.

    Args:
        model: the graph as it is.
        converted: the converted graph (the same inputs and outputs).
        done: the rewrite's report.
        feed: graph input name -> array, for both.
        rounds: the most timed rounds of each, interleaved (0: not timed); fewer where a
            run of both takes over BUDGET_S.
        progress: called with a line at each step (``--verbose``).

    Returns:
        the measured ``Effect``.
    """
    effect = Effect(done)
    say = progress or (lambda msg: None)
    ran = _run_and_time(model, converted, feed, rounds, effect, say)
    if ran is None:
        return effect
    for name, x, y in zip(*ran):
        line, worst = _diff(name, x, y)
        effect.max_diff = max(effect.max_diff, worst)
        if line is not None:
            effect.differs.append(line)
    if effect.differs and not done.repairs:
        say("the outputs differ: judging each rewritten node on what the original graph fed it")
        try:
            effect.at_rewrite, effect.rounding, effect.untraced = trace(model, converted, feed)
        except Exception as e:  # noqa: BLE001 - untraced: the report says it could not tell
            logging.getLogger("ort_roi").debug("trace failed", exc_info=True)
            effect.untraced = [f"the trace failed: {type(e).__name__}: {first_line(e)}"]
    return effect


def _run_and_time(model: onnx.ModelProto, converted: onnx.ModelProto,
                  feed: dict[str, np.ndarray], rounds: int, effect: Effect,
                  say: Callable[[str], None]
                  ) -> tuple[list[str], list[np.ndarray], list[np.ndarray]] | None:
    """Run both graphs once, then time them in interleaved rounds (``effect``'s times).

    Returns:
        (the output names, the outputs as it is, converted); None where the converted graph
        (or onnxruntime) failed, ``effect.error`` saying how.
    """
    handler, logger = OpErrors(), logging.getLogger("ort_roi")
    logger.addHandler(handler)
    try:
        native, converted_s = plain_session(model), plain_session(converted)
        names = [o.name for o in native.get_outputs()]
        start = time.perf_counter()
        a = native.run(None, feed)
        middle = time.perf_counter()
        logged = len(handler.messages)
        b = converted_s.run(names, feed)
        first = time.perf_counter() - start
        if len(handler.messages) > logged:
            effect.error = f"the converted graph's ort_roi node failed: {handler.messages[logged]}"
            return None
        rounds = min(rounds, max(1, int(BUDGET_S / max(first, 1e-9)))) if rounds else 0
        say(f"both graphs ran once ({middle - start:.1f} s as it is, {first - middle + start:.1f}"
            f" s converted, untimed: a first run pays for its setup); timing {rounds} "
            f"interleaved round(s)")
        if rounds:
            t = time_together({"native": lambda: native.run(None, feed),
                               "converted": lambda: converted_s.run(names, feed)}, rounds,
                              min_sample_s=0, warmup=False)
            effect.native_s, effect.converted_s = t["native"][0], t["converted"][0]
            effect.rounds = rounds
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal is the finding
        effect.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
        return None
    finally:
        logger.removeHandler(handler)
    return names, a, b


def trace(model: onnx.ModelProto, converted: onnx.ModelProto,
          feed: dict[str, np.ndarray]) -> tuple[list[str], str | None, list[str]]:
    """Where a rewrite that computes the same changed the graph's outputs: every ort_roi node
    of the converted graph (a node's rewrite or a fused stage) is judged on the inputs the
    original graph fed it. Its part of the converted graph (the node, the nodes convert added
    before it back to tensors the original graph computes, and after it forward to such
    tensors, as a Cast back to the graph's type) runs apart in a plain session on the values
    those tensors had in the original graph's run, and what it makes is compared with what
    the original graph computed there. So an upstream difference (a selection that picked
    other boxes) never keeps a node from being judged. A node whose part cannot be cut out
    (its output reaches only another rewritten node, or a subgraph's node lies in it) is
    counted as not judged, and then no "no defect" is said.

    Args:
        model: the graph as it is.
        converted: what convert made of it.
        feed: graph input name -> array, for both.

    Returns:
        (one line per node whose output differs beyond ``ROUNDING`` or whose kernel raised,
        the words saying every node agrees to rounding (None unless every node was judged
        and none differs), one line per node not judged, saying why).
    """
    rewritten = [n for n in converted.graph.node if n.domain == DOMAIN]
    known = ({o for n in model.graph.node for o in n.output} | set(feed)
             | {i.name for i in model.graph.initializer})
    weights = {i.name: i for i in converted.graph.initializer}
    originals_reached = _leads_to(converted, known - set(feed))
    parts, untraced = [], []
    for node in rewritten:
        outs = originals_reached([o for o in node.output if o])
        part = _part(converted, node, outs or [], known, weights) if outs else \
            "its output reaches no tensor of the original graph but through another rewritten node"
        if isinstance(part, str):
            untraced.append(f"node {node.name!r} ({node.op_type}): {part}")
        else:
            parts.append((node, outs, part))
    names = list(dict.fromkeys(t for _, outs, (_, ins) in parts for t in [*ins, *outs]))
    before = run_exposing(model, names, feed)[0] if names else {}
    beyond, worst = [], (0.0, 0.0)
    for node, outs, (sub, ins) in parts:
        what = f"node {node.name!r} ({node.op_type})"
        try:
            values = {t: before[t] for t in ins}
            _, got, errors = run_plain(_typed(sub, values), values)
        except Exception as e:  # noqa: BLE001 - its part would not run apart: not judged
            untraced.append(f"{what}: its part of the graph would not run apart "
                            f"({type(e).__name__}: {str(e).strip().splitlines()[0]})")
            continue
        if errors:
            beyond.append(f"{what}, fed what the original graph fed it, raised: {errors[0]}")
            continue
        for name, y in zip(outs, got):
            ok, d, v, how = _agreement(before[name], y)
            if not ok:
                beyond.append(f"{what}, fed what the original graph fed it, output "
                              f"{name!r} {how}")
            elif _relative(d, v) >= _relative(*worst):
                worst = (d, v)
    if beyond or untraced:
        return beyond, None, untraced
    picks = Counter(n.op_type for n in iter_nodes(converted.graph)
                    if n.domain != DOMAIN and n.op_type in SELECTIONS)
    which = ", ".join(f"{op} x{k}" for op, k in sorted(picks.items()))
    k = len(rewritten)
    return [], (f"every rewritten node ({k} of {k}), fed what the original graph fed it, "
                f"computes what the graph did to rounding: largest |diff| {worst[0]:.3g} on values up to {worst[1]:.3g}, within {ROUNDING:g} of them; "
                + (f"the other nodes are onnxruntime's, and where a value moved by rounding "
                   f"this graph's selections ({which}) may pick otherwise"
                   if picks else "the other nodes are onnxruntime's (the graph has no "
                   "selection): they magnified that rounding")
                + ": no defect of ort_roi's in this run"), []


def _part(g: onnx.ModelProto, node: onnx.NodeProto, outs: list[str], known: set[str],
          weights: dict) -> tuple[onnx.ModelProto, list[str]] | str:
    """The part of ``g`` that computes ``outs`` from tensors of ``known`` (the original
    graph's): a model of it, and its inputs; or why it cannot be cut out."""
    producer = {o: n for n in g.graph.node for o in n.output if o}
    nodes, inputs, inits, todo, seen = [], [], [], list(outs), set()
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in weights:
            inits.append(weights[t])
            continue
        if t in known and t not in outs:
            inputs.append(t)
            continue
        n = producer.get(t)
        if n is None:
            return f"tensor {t!r} has no producer in the converted graph"
        if _has_subgraphs(n) or (n.domain == DOMAIN and n is not node):
            return (f"what feeds it passes through node {n.name!r} ({n.op_type}), which "
                    f"{'holds a subgraph' if _has_subgraphs(n) else 'is rewritten too'}")
        if n not in nodes:
            nodes.append(n)
            todo.extend(n.input)
        if len(seen) > MAX_WALK:
            return f"its part of the graph passes {MAX_WALK} tensors"
    order = [n for n in g.graph.node if any(n is x for x in nodes)]
    sub = onnx.ModelProto()
    sub.CopyFrom(g)
    sub.graph.CopyFrom(onnx.helper.make_graph(
        order, "part", [], [onnx.ValueInfoProto(name=t) for t in outs], inits))
    return sub, inputs


def _typed(sub: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``sub`` with its graph inputs declared, of the types (any shape) of ``values``."""
    sub.graph.input.extend(onnx.helper.make_tensor_value_info(
        t, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), None)
        for t, v in values.items())
    return sub


#: Tensors a trace walks through at most, either way, for one node.
MAX_WALK = 256


def _leads_to(g: onnx.ModelProto, original: set[str]):
    """A function: tensor names of ``g`` -> the tensors of ``original`` (the original graph
    computes them) they lead to through onnxruntime's nodes of ``g`` alone (not through
    another rewritten node); None where the walk passes ``MAX_WALK`` tensors."""
    step: dict[str, list[str]] = {}
    for n in g.graph.node:
        if n.domain != DOMAIN:
            for i in n.input:
                step.setdefault(i, []).extend(x for x in n.output if x)

    def walk(start: list[str]) -> list[str] | None:
        found, seen, todo = set(), set(), list(start)
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in original:
                found.add(t)
                continue
            if len(seen) > MAX_WALK:
                return None
            todo.extend(step.get(t, []))
        return sorted(found)

    return walk


def _relative(diff: float, scale: float) -> float:
    """|diff| relative to the values' scale (a zero scale: 0 for no diff, else inf)."""
    return diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0)


def _has_subgraphs(n: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in n.attribute)


def _same(x, y) -> bool:
    """Whether a tensor from both graphs is the same, bit for bit (NaN where NaN)."""
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))


def _agreement(x, y) -> tuple[bool, float, float, str]:
    """Whether a node's output from both graphs agrees: floats where they differ within
    ROUNDING of the largest finite |value| (inf or NaN only where both have it), anything else
    equal. Returns (agrees, the largest |difference|, the largest |value|, what differs)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape:
        return False, np.nan, np.nan, f"has shape {list(x.shape)} here, {list(y.shape)} converted"
    if x.dtype.kind not in "fc" or y.dtype.kind not in "fc":
        n = int(np.count_nonzero(x != y))
        return not n, np.nan, np.nan, f"differs in {n} of {x.size} values"
    x, y = x.astype(np.float64), y.astype(np.float64)
    apart = ~((x == y) | (np.isnan(x) & np.isnan(y)))
    finite = np.isfinite(x)
    s = float(np.max(np.abs(x[finite]), initial=0.0))
    if (apart & ~(finite & np.isfinite(y))).any():
        return False, np.inf, s, "differs where a value is infinite or NaN"
    d = float(np.max(np.abs(x - y)[apart], initial=0.0))
    return d <= ROUNDING * s, d, s, f"differs by up to {d:.3g} on values up to {s:.3g}"
