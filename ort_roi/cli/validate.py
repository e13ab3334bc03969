"""``ort-roi validate`` (does a plain onnxruntime session with ort_roi.session_options() run
the file as it is, and does each RoI node in it compute its definition on the inputs the model
feeds it?) and ``ort-roi convert`` (the rewrite pass, graph/rewrite.py)."""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import RoiOpError, node_label
from ..graph import exporters, reference, schemas, shapes
from ..graph.inputs import generate_inputs
from ..graph.nodes import given_attrs, iter_nodes, node_attrs, opset
from ..graph.rewrite import rewrite
from ..runtime.probe import plain_session_error
from ..spec import OpSpec
from ..ops import form
from .compare import run_plain


PLAIN = "a plain onnxruntime session with ort_roi.session_options()"

#: Rows (boxes) of each RoI node compared with its definition, evenly spaced (``--rows``).
ROWS = 64
#: Seconds each node's comparison may take; past them it stops and says so (``--node-seconds``).
NODE_SECONDS = 30.0
#: A node's output equals its definition's where |diff| <= ATOL + RTOL * |definition|.
RTOL = ATOL = 1e-4
WITHIN = f"(within {ATOL:g} + {RTOL:g} x |value|)"


@dataclass
class Validation:
    """The answer of ``ort-roi validate``: does a plain onnxruntime session with
    ``ort_roi.session_options()`` run the file as it is, and does it compute what it should.

    ``problems``: (step, message) pairs, empty when the answer is yes; ``notes``: what is
    worth knowing but no failure; ``compared``: one line per RoI node whose output equals
    its definition (what was compared); ``runnable``: whether a plain session runs it as it is;
    ``roi_nodes``: the RoI nodes (of any form) in it; ``after_convert``: when a plain session
    cannot run it, the same check of what ``ort-roi convert`` makes of it.
    """

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)
    runnable: bool = True
    roi_nodes: int = 0
    after_convert: "Validation | None" = None

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(model: onnx.ModelProto | str, r: int = 6, seed: int = 0, rows: int = ROWS,
             node_seconds: float = NODE_SECONDS,
             progress: Callable[[str], None] | None = None) -> Validation:
    """Check a model: can a plain onnxruntime session with ``ort_roi.session_options()`` run
    it as it is (every RoI node named with what to do when not), do our attribute rules,
    onnx's checker (full) and strict shape inference accept it, and does each RoI node (ours,
    and those onnxruntime runs on its own kernel that ort_roi would replace) compute its
    definition (ort_roi.definitions) on the inputs the model really feeds it.

    The model runs once in onnxruntime on generated inputs (following the declared shapes)
    with every RoI node's inputs and outputs exposed; then each node's definition computes
    some of its rows (boxes) from the captured inputs and they are compared with the captured
    outputs. Nothing else of the model is evaluated outside onnxruntime (a detector's NMS and
    thresholds are onnxruntime's alone). Graph outputs that carry no shape (onnxruntime runs
    such graphs; onnx's full check refuses them) are checked with their inferred shapes, said
    in a note. A graph a plain session cannot run is also checked as ``ort-roi convert``
    rewrites it (``after_convert``).

    Args:
        model: the model or the path of its file.
        r: boxes in the generated inputs where no declared size fixes their number.
        seed: of the generated inputs.
        rows: the most rows (boxes) of each RoI node compared with its definition, evenly
            spaced over the node's rows.
        node_seconds: the time each node's comparison may take: past it, the rows compared so
            far are reported, said in the node's line.
        progress: called with a line at each step (what it is doing and how long it took).

    Returns:
        the answer (``Validation``).
    """
    say = progress or (lambda msg: None)
    v = Validation()
    t = time.perf_counter()
    try:
        m = onnx.load(model) if isinstance(model, str) else model
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        v.problems.append(("load", f"cannot read the model: {_first_line(e)}"))
        v.runnable = False
        return v
    if isinstance(model, str):
        say(f"loaded ({time.perf_counter() - t:.1f} s)")
    t = time.perf_counter()
    v.roi_nodes = _plain_session_check(m, v)
    say(f"{v.roi_nodes} RoI node(s); a plain session "
        f"{'runs' if v.runnable else 'cannot run'} it as it is ({time.perf_counter() - t:.1f} s)")
    if v.roi_nodes == 0:
        v.notes.append("no RoI node (no node of a form ort_roi runs): nothing here for ort_roi")
    if not v.runnable:
        c = _copy(m)
        try:
            done = rewrite(c, "ort_roi")
        except Exception as e:  # noqa: BLE001 - the rewrite's refusal names the node
            v.after_convert = Validation(problems=[("convert", _first_line(e))], runnable=False)
            return v
        say("checking what `ort-roi convert` makes of it")
        v.after_convert = Validation(roi_nodes=v.roi_nodes, notes=list(done.notes))
        _check_and_run(c, v.after_convert, r, seed, rows, node_seconds, say)
        return v
    _check_and_run(m, v, r, seed, rows, node_seconds, say)
    return v


def _plain_session_check(m: onnx.ModelProto, v: Validation) -> int:
    """Name every RoI node a plain session cannot run as it is and what to do; then ask
    onnxruntime itself. Returns the number of RoI nodes."""
    fix = "run `ort-roi convert IN OUT` (or use ort_roi.InferenceSession)"
    n = 0
    for node in iter_nodes(m.graph):
        f = form(node.domain, node.op_type)
        if f is None:
            continue
        n += 1
        what = f"node {node_label(node)!r} ({f.domain or 'onnx'}::{f.op_type})"
        if f.registered:
            try:
                node_attrs(node, f.spec)
            except RoiOpError as e:
                v.problems.append(("attributes", str(e)))
                continue
            missing = [a.name for a in f.spec.attrs if a.name not in given_attrs(node)]
            if missing:
                v.problems.append(("plain session", f"{what} omits the attribute(s) "
                                   f"{', '.join(missing)}; onnxruntime requires every "
                                   f"attribute of a Python op: {fix}, which writes their "
                                   f"defaults"))
        elif f.guard_levels:
            v.problems.append(("plain session", f"{what}: the exported node has a variable "
                               f"number of inputs and list attributes, which a Python op "
                               f"cannot declare; {fix}, which rewrites it as ort_roi's "
                               f"fixed-arity op"))
        else:
            v.notes.append(f"{what} runs on onnxruntime's own kernel; `ort-roi convert` moves "
                           f"it into ort_roi")
            if f.two_maxes and given_attrs(node).get("mode") == "max":
                v.notes.append(f"{what}: onnxruntime computes mode=max as the largest weighted "
                               f"corner of any sample (onnxruntime issue 6146), not the largest "
                               f"sample that mmcv and OpenVINO compute")
    if not v.problems:
        why = plain_session_error(m)
        if why is not None:
            v.problems.append(("plain session", f"onnxruntime refuses it: {why}" +
                               (f"; {fix}" if n else "")))
    v.runnable = not v.problems
    return n


def _check_and_run(m: onnx.ModelProto, v: Validation, r: int, seed: int, rows: int,
                   node_seconds: float, say: Callable[[str], None]) -> None:
    steps = [("checker", lambda: _check(m, v.notes)),
             ("shapes", lambda: onnx.shape_inference.infer_shapes(m, check_type=True,
                                                                  strict_mode=True))]
    for step, fn in steps:
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the first failure is the finding
            v.problems.append((step, _first_line(e)))
            return
        say(f"{'onnx checker (full)' if step == 'checker' else 'strict shape inference'}: "
            f"passed ({time.perf_counter() - t:.1f} s)")
    nodes = [n for n in m.graph.node if form(n.domain, n.op_type) is not None]
    inner = [node_label(n) for top in m.graph.node for a in top.attribute
             for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))
             for n in iter_nodes(g) if form(n.domain, n.op_type) is not None]
    if inner:
        v.notes.append(f"{len(inner)} RoI node(s) inside If / Loop bodies ({', '.join(inner[:3])}"
                       f"{', ...' if len(inner) > 3 else ''}): not compared with their "
                       f"definitions (a subgraph's tensors are not exposed)")
    t = time.perf_counter()
    try:
        feed = generate_inputs(m, r, seed)
        say(f"running it in onnxruntime on generated inputs, the inputs and outputs of "
            f"{len(nodes)} RoI node(s) exposed")
        seen, errors = _run_exposed(m, nodes, feed)
    except Exception as e:  # noqa: BLE001 - onnxruntime's whole message is the finding
        v.problems.append(("run", f"{type(e).__name__}: {str(e).strip()}"))
        return
    v.problems += [("run", msg) for msg in errors]
    if errors:
        return
    say(f"ran in {time.perf_counter() - t:.1f} s")
    shapes = ", ".join(f"{k} {list(a.shape)}" for k, a in feed.items())
    v.notes.append(f"generated inputs ({shapes}): onnxruntime runs it" +
                   ("; each RoI node above compared with its definition (ort_roi.definitions) "
                    "on the inputs the run fed it" if nodes else ""))
    onnx_opset = opset(m) or 1
    for i, node in enumerate(nodes, 1):
        t = time.perf_counter()
        say(f"node {i}/{len(nodes)} {node_label(node)!r}: comparing with its definition")
        ok, line = _compare_node(node, seen, onnx_opset, rows, node_seconds)
        if ok:
            v.compared.append(line)
        else:
            v.problems.append(("definition", line))
        say(f"node {i}/{len(nodes)}: {'OK' if ok else 'FAILED'} ({time.perf_counter() - t:.1f} s)")


def _run_exposed(m: onnx.ModelProto, nodes: list[onnx.NodeProto],
                 feed: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """One run of ``m`` in a plain session with the inputs and outputs of ``nodes`` added to
    a copy's graph outputs: every tensor they read or write (graph inputs and initializers
    from the feed and the model), and the errors ort_roi's ops logged."""
    names = list(dict.fromkeys(x for n in nodes for x in [*n.input, *n.output] if x))
    seen: dict[str, np.ndarray] = dict(feed)
    weights = {i.name: i for i in m.graph.initializer}
    outputs = {o.name for o in m.graph.output}
    c = _copy(m)
    for x in names:
        if x in weights and x not in seen:
            seen[x] = numpy_helper.to_array(weights[x])
        elif x not in seen and x not in outputs:
            c.graph.output.append(onnx.ValueInfoProto(name=x))
    sess, got, errors = run_plain(c, feed)
    seen.update(zip((o.name for o in sess.get_outputs()), got))
    return seen, errors


def _compare_node(node: onnx.NodeProto, seen: dict[str, np.ndarray], onnx_opset: int,
                  rows: int, seconds: float) -> tuple[bool, str]:
    """Compare a node's captured outputs with its definition on at most ``rows`` of its boxes
    (evenly spaced), in chunks until ``seconds`` have passed. Returns (ok, the node's line)."""
    f = form(node.domain, node.op_type)
    kernel = "" if f.registered else " on onnxruntime's kernel"
    what = f"node {node_label(node)!r} ({f.domain or 'onnx'}::{f.op_type}{kernel})"
    try:
        spec, attrs = reference.node_definition(node, onnx_opset)
        inputs = [seen[x] for x in node.input]
    except (RoiOpError, ValueError, KeyError) as e:
        return False, f"{what}: its definition cannot be set up: {e}"
    defined = "its definition" + ("" if spec.key == f.key else f" ({spec.domain}::{spec.name})")
    if not spec.rowwise:
        return _compare_whole(node, spec, attrs, inputs, seen, what, defined)
    n = len(inputs[spec.boxes_input])
    picked = np.unique(np.linspace(0, n - 1, min(rows, n)).round().astype(np.int64))
    k = max(1, math.ceil(len(picked) / 8))
    chunks = [picked[i::k] for i in range(k)]  # each spread over the rows, so a stop is too
    start, done, worst = time.perf_counter(), 0, 0.0
    for chunk in chunks:
        try:
            want = reference.run_definition(spec, attrs,
                                            reference.select_rows(spec, inputs, chunk))
        except Exception as e:  # noqa: BLE001 - a definition's refusal is the finding
            return False, f"{what}: {defined} raised {type(e).__name__}: {e}"
        for name, w in zip(node.output, want):
            if not name:
                continue
            got = seen[name]
            if got.shape[1:] != w.shape[1:] or len(got) != n:
                return False, (f"{what}: output {name!r} has shape {list(got.shape)}; "
                               f"{defined} gives rows of shape {list(w.shape[1:])} for "
                               f"{n} boxes")
            diff, at, by = _difference(got[chunk], w)
            worst = max(worst, diff)
            if at is not None:
                return False, (f"{what}: output {name!r} differs from {defined} at row "
                               f"{int(chunk[at[0]])} (index {at[1:]}): {by} ({done + len(chunk)}"
                               f" of {n} rows compared)")
        done += len(chunk)
        if time.perf_counter() - start > seconds and done < len(picked):
            break
    if n == 0:
        return True, f"{what}: OK: the run gave it no boxes; {defined} gives no rows either"
    which = ((f"all {n} rows equal" if n > 1 else "its one row equals") if done == n else
             f"{done} of {n} rows (evenly spaced; at most --rows {rows}")
    if done < n:
        which += (f", stopped after {seconds:g} s by --node-seconds" if done < len(picked)
                  else "") + ") equal"
    return True, f"{what}: OK: {which} {defined} {WITHIN}, max |diff| {worst:.2g}"


def _compare_whole(node: onnx.NodeProto, spec: OpSpec, attrs: dict, inputs: list[np.ndarray],
                   seen: dict[str, np.ndarray], what: str, defined: str) -> tuple[bool, str]:
    """Compare every output of a node whose rows are not its boxes' own (a proposal stage
    selects and reorders them) with its definition run on all of its inputs (whole: not
    bounded by --node-seconds; GenerateProposals' literal definition takes seconds on a
    C4 RPN of 6000 anchors per image)."""
    try:
        want = reference.run_definition(spec, attrs, inputs)
    except Exception as e:  # noqa: BLE001 - a definition's refusal is the finding
        return False, f"{what}: {defined} raised {type(e).__name__}: {e}"
    worst = 0.0
    for name, w in zip(node.output, want):
        if not name:
            continue
        got = seen[name]
        if got.shape != w.shape:
            return False, (f"{what}: output {name!r} has shape {list(got.shape)}; {defined} "
                           f"gives {list(w.shape)}")
        diff, at, by = _difference(got, w)
        worst = max(worst, diff)
        if at is not None:
            return False, f"{what}: output {name!r} differs from {defined} at {at}: {by}"
    return True, (f"{what}: OK: all its outputs equal {defined} (whole) {WITHIN}, "
                  f"max |diff| {worst:.2g}")


def _difference(got: np.ndarray, want: np.ndarray) -> tuple[float, tuple | None, str]:
    """The largest |got - want| and, where they differ by more than ATOL + RTOL x |want|, the
    index of the first such element and the words saying by how much."""
    a, b = got.astype(np.float64), want.astype(np.float64)
    if not a.size:
        return 0.0, None, ""
    diff = np.abs(a - b)
    worst = float(np.nanmax(diff, initial=0.0))
    bad = ~(np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))
    if not bad.any():
        return worst, None, ""
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return worst, at, (f"{a[at]:.6g} vs {b[at]:.6g}, |diff| {diff[at]:.3g} > {ATOL:g} + "
                       f"{RTOL:g} x |definition|")


def _check(m: onnx.ModelProto, notes: list[str]) -> None:
    """The ONNX checker (full); outputs that carry no shape take their inferred shapes."""
    bare = [o.name for o in m.graph.output if not o.type.tensor_type.HasField("shape")]
    if not bare:
        onnx.checker.check_model(m, full_check=True)
        return
    inferred = onnx.shape_inference.infer_shapes(m)
    still = [o.name for o in inferred.graph.output if not o.type.tensor_type.HasField("shape")]
    head = (f"graph output(s) {', '.join(bare)} carry no shape (onnxruntime runs such a "
            f"graph; onnx's full check refuses it)")
    if still:  # the checker refuses them in any mode: it checks the graph without them
        why = "" if schemas.SHAPE_INFERENCE else " (ort_roi's shape inference needs onnx >= 1.19)"
        notes.append(f"{head}: none could be inferred for {', '.join(still)}{why}, so the "
                     f"checker checked the graph without them")
        rest = _copy(inferred)
        del rest.graph.output[:]
        rest.graph.output.extend(o for o in inferred.graph.output if o.name not in still)
        onnx.checker.check_model(rest, full_check=True)
    else:
        notes.append(f"{head}: checked with the inferred shapes")
        onnx.checker.check_model(inferred, full_check=True)


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    context = [ln for ln in lines if "node" in ln.lower() and ln is not lines[0]]
    return "; ".join(lines[:1] + context[:1]) or type(e).__name__


def cmd_validate(args: argparse.Namespace) -> int:
    """Does a plain onnxruntime session with ort_roi.session_options() run MODEL as it is,
    and does each RoI node compute its definition? Every RoI node it cannot run is named with
    what to do; then onnx's checker, shape inference, and one onnxruntime run with generated
    inputs whose RoI nodes' inputs and outputs are captured: each node's definition
    (ort_roi.definitions) recomputes some of its rows from those inputs (--rows,
    --node-seconds), compared with what onnxruntime computed. One line per node; progress on
    stderr; exit 0 when clean, 1 otherwise."""
    paths = model_files(args.models)
    if not paths:
        print(f"ort-roi validate: no .onnx file in {', '.join(args.models)}", file=sys.stderr)
        return 1
    bad = 0
    for path in paths:
        start = time.perf_counter()

        def progress(msg: str) -> None:
            print(f"ort-roi validate: {path}: {msg} [{time.perf_counter() - start:.0f} s]",
                  file=sys.stderr, flush=True)

        v = validate(path, r=args.rois, rows=args.rows, node_seconds=args.node_seconds,
                     progress=progress)
        _print_validation(path, v)
        bad += not v.ok
    return 1 if bad else 0


def _print_validation(path: str, v: Validation) -> None:
    if v.ok:
        print(f"{path}: OK: {PLAIN} runs it as it is")
    elif not v.runnable:
        print(f"{path}: FAILED: {PLAIN} cannot run it as it is")
    else:
        print(f"{path}: FAILED")
    _print_lines(v, "  ")
    a = v.after_convert
    if a is not None:
        verdict = "OK, a plain session runs it" if a.ok else "FAILED"
        print(f"  after `ort-roi convert`: {verdict}")
        _print_lines(a, "    ")


def _print_lines(v: Validation, indent: str) -> None:
    for step, msg in v.problems:  # a message of several lines (onnxruntime's) stays whole
        print(f"{indent}{step}: " + msg.replace("\n", "\n" + indent + "  "))
    for msg in v.compared:
        print(f"{indent}{msg}")
    for msg in v.notes:
        print(f"{indent}note: {msg}")


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite a graph so that a plain onnxruntime session with ort_roi runs it: ONNX
    RoiAlign / MaxRoiPool into ort_roi, torchvision's exported MultiScaleRoIAlign stages
    into one PyramidRoIAlign node each, exporters' nodes with every attribute (--to onnx: ort_roi
    RoiAlign / ROIPooling max and the fused stages back to standard ONNX)."""
    try:
        m = onnx.load(args.input)
    except Exception as e:  # noqa: BLE001 - a missing file or not a model: say which
        print(f"ort-roi convert: cannot read the model {args.input}: {_first_line(e)}",
              file=sys.stderr)
        return 1
    try:
        done = rewrite(m, to=args.to, roialign_max=args.roialign_max, fuse=args.fuse,
                       exporter=args.exporter)
        shapes.annotate(m)  # as convert(): our nodes' inferred output types
        onnx.save(m, args.output)
    except (ValueError, OSError) as e:
        print(f"ort-roi convert: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a defect of ours: still a message, not a traceback
        print(f"ort-roi convert: internal error {type(e).__name__}: {e} (please report it)",
              file=sys.stderr)
        return 1
    print(f"{args.input} -> {args.output}: {moved_count(done.moved)} "
          f"({done.summary()}); every node of ort_roi or another exporter has its attributes "
          f"explicit")
    for note in done.notes:
        print(f"  note: {note}")
    return 0


def model_files(paths: list[str]) -> list[str]:
    """The files named, a folder standing for the .onnx files in it (sorted)."""
    out: list[str] = []
    for p in paths:
        d = pathlib.Path(p)
        out += sorted(map(str, d.glob("*.onnx"))) if d.is_dir() else [p]
    return out


def moved_count(moved: list) -> str:
    """What convert rewrote, counted as what it is: nodes, fused stages (a torchvision,
    PaddleDetection or GluonCV RoI stage of many nodes become one) and fused Loops."""
    stages = sum(" stage" in a for _, a, _ in moved)
    loops = sum("Loop" in a and " stage" not in a for _, a, _ in moved)
    nodes = len(moved) - stages - loops
    parts = [f"{nodes} node(s) rewritten"] if nodes or not (stages or loops) else []
    if stages:
        parts.append(f"{stages} stage(s) fused into one node each")
    if loops:
        parts.append(f"{loops} Loop(s) fused into one node each")
    return ", ".join(parts)


def add_commands(sub) -> None:
    """Attach validate and convert to the ort-roi parser."""
    p = sub.add_parser("validate", help=cmd_validate.__doc__, description=cmd_validate.__doc__)
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="ONNX files, or folders (their .onnx files)")
    p.add_argument("--rois", type=int, default=6,
                   help="boxes in the generated inputs where no declared size fixes them")
    p.add_argument("--rows", type=int, default=ROWS,
                   help=f"the most rows (boxes) of each RoI node compared with its "
                        f"definition, evenly spaced (default {ROWS})")
    p.add_argument("--node-seconds", type=float, default=NODE_SECONDS,
                   help=f"time for each node's comparison; past it the rows compared so far "
                        f"are reported (default {NODE_SECONDS:g})")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("convert", help=cmd_convert.__doc__, description=cmd_convert.__doc__)
    p.add_argument("input", metavar="IN", help="the ONNX model to convert (not changed)")
    p.add_argument("output", metavar="OUT", help="where to write the converted model")
    p.add_argument("--to", choices=("ort_roi", "onnx"), default="ort_roi",
                   help="ort_roi: RoiAlign / MaxRoiPool -> ort_roi (default); onnx: the reverse")
    p.add_argument("--roialign-max", choices=("sample", "onnx"), default="sample",
                   help="ONNX RoiAlign mode=max as the largest bilinear sample (sample, the "
                        "default: mmcv, OpenVINO) or as onnxruntime computes it (onnx)")
    p.add_argument("--no-fuse", dest="fuse", action="store_false",
                   help="leave torchvision's MultiScaleRoIAlign stages node by node (each "
                        "RoiAlign still moved) instead of one PyramidRoIAlign node")
    p.add_argument("--exporter", choices=exporters.NAMES, default=None,
                   help="who wrote the model (default: told from its producer_name and graph "
                        "name): that exporter's repairs apply (mx2onnx's RoiAlign and Splits, "
                        "tf2onnx's crop_and_resize); none: no exporter's")
    p.set_defaults(fn=cmd_convert)
