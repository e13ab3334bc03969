"""``ort-roi validate``: does a plain onnxruntime session with ort_roi.session_options() run
the file as it is, and does each RoI node in it compute its definition on the inputs the model
feeds it (compared in compare.py)?"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import time
import zipfile
from typing import Callable

import numpy as np
import onnx

from ..errors import RoiOpError, first_line, node_label
from ..graph import schemas
from ..graph import shapes
from ..graph.files import ModelFileError, read_model
from ..graph.inputs import GivenInputsUnfit, feed_problems, generate_inputs
from ..graph.nodes import copy_model, given_attrs, iter_nodes, node_attrs, opset
from ..graph.rewrite import rewrite
from ..ops import form
from ..runtime.probe import plain_session_error, unprovided
from .args import POSITIVE_INT, SECONDS
from .compare import compare_node, run_exposing
from .effect import convert_effect
from .verdicts import EXIT, Validation, print_validation


#: Rows (boxes) of each RoI node compared with its definition, evenly spaced (``--rows``).
ROWS = 64
#: Seconds each node's comparison may take; past them it stops and says so (``--node-seconds``).
NODE_SECONDS = 30.0
#: The advice where convert makes a graph run, and its words where the converted graph
#: fails too (the check of it follows: "after `ort-roi convert`").
CONVERT = "run `ort-roi convert IN OUT` (or use ort_roi.InferenceSession)"
CONVERT_FAILS = (r"`ort-roi convert` \1, but what it writes does not run either (after "
                 r"`ort-roi convert`, below)")
#: What convert does with an exporter's node of variable arity.
FIXED_ARITY = "rewrites it as ort_roi's fixed-arity op"
#: What validate asks for where it cannot make inputs the graph accepts (step "inputs").
OWN_INPUTS = "give your own with --inputs FILE.npz"


def validate(model: onnx.ModelProto | str, r: int = 6, seed: int = 0, rows: int = ROWS,
             node_seconds: float = NODE_SECONDS,
             progress: Callable[[str], None] | None = None,
             inputs: dict[str, np.ndarray] | None = None) -> Validation:
    """Check a model: can a plain onnxruntime session with ``ort_roi.session_options()`` run
    it as it is (every RoI node named with what to do when not), do our attribute rules,
    onnx's checker (full) and strict shape inference accept it, does each RoI node (ours,
    and those onnxruntime runs on its own kernel that ort_roi would replace) compute its
    definition (ort_roi.definitions) on the inputs the model really feeds it, and what would
    ``ort-roi convert`` change.

    The model runs once in onnxruntime on generated inputs (following the declared shapes,
    and the RoI nodes convert would write, so that an exporter's form gets inputs its
    framework reads) with every RoI node's inputs and outputs exposed; then each node's
    definition computes some of its rows (boxes) from the captured inputs and they are
    compared with the captured outputs. Nothing else of the model is evaluated outside
    onnxruntime (a detector's NMS and thresholds are onnxruntime's alone). Where convert would
    change the graph, the converted graph runs on the same inputs: its outputs are compared
    with the original's and both are timed (``Validation.effect``). Graph outputs that carry
    no shape are checked with their inferred shapes, said in a note. A graph a plain session
    cannot run is also checked as ``ort-roi convert`` rewrites it (``after_convert``).

    Args:
        model: the model or the path of its file.
        r: boxes in the generated inputs where no declared size fixes their number.
        seed: of the generated inputs.
        rows: the most rows (boxes) of each RoI node compared with its definition, evenly
            spaced over the node's rows.
        node_seconds: the time each node's comparison may take: past it, the rows compared so
            far are reported, said in the node's line.
        progress: called with a line at each step (what it is doing and how long it took).
        inputs: graph input name -> array, used instead of generated ones (the others are
            generated to fit them). Where the generated inputs cannot satisfy the graph's RoI
            nodes (before the run, or seen in it) or ``inputs`` do not fit the graph,
            ``problems`` holds ("inputs", why): the generator's limit, not the model's failure.

    Returns:
        the answer (``Validation``).
    """
    say = progress or (lambda msg: None)
    v = Validation()
    t = time.perf_counter()
    try:
        m = read_model(model) if isinstance(model, str) else model
    except ModelFileError as e:  # the file's own problem, in plain words
        v.problems.append(("load", str(e)))
        v.runnable = False
        return v
    if isinstance(model, str):
        say(f"loaded ({time.perf_counter() - t:.1f} s)")
    weights = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in weights]
    unknown = sorted(set(inputs or {}) - {i.name for i in m.graph.input})
    if unknown:
        lacks = [x for x in names if x not in (inputs or {})]
        v.problems.append(("inputs", f"--inputs holds {', '.join(map(repr, unknown))}, not "
                                     f"input(s) of this graph (its inputs: "
                                     f"{', '.join(names) or 'none'})"
                           + (f"; it lacks {', '.join(map(repr, lacks))}" if lacks else "")))
        return v
    t = time.perf_counter()
    v.roi_nodes = plain_session_check(m, v)
    say(f"{v.roi_nodes} RoI node(s); a plain session "
        f"{'runs' if v.runnable else 'cannot run'} it as it is ({time.perf_counter() - t:.1f} s)")
    c = copy_model(m)
    try:
        done = rewrite(c, "ort_roi")
    except Exception as e:  # noqa: BLE001 - the rewrite's refusal names the node
        if not v.runnable:
            v.after_convert = Validation(problems=[("convert", first_line(e))], runnable=False)
            return v
        done = None
        v.notes.append(f"`ort-roi convert` would refuse it: {first_line(e)}")
    if v.roi_nodes == 0 and not (done and done.moved):
        v.notes.append("no RoI node (no node of a form ort_roi runs or convert rewrites): "
                       "nothing here for ort_roi")
    if not v.runnable:
        say("checking what `ort-roi convert` makes of it")
        v.after_convert = Validation(roi_nodes=v.roi_nodes, notes=list(done.notes))
        _check_and_run(c, v.after_convert, _feed(c, inputs, r, seed, v.after_convert), rows,
                       node_seconds, say)
        if v.after_convert.verdict == "FAILED":  # advise convert only where it makes it run
            v.problems = [(step, re.sub(re.escape(CONVERT) + r", which ([^;]*)", CONVERT_FAILS,
                                        msg)) for step, msg in v.problems]
        return v
    # the inputs as the converted graph's RoI nodes read them (an exporter's form that only
    # convert recognises gets boxes and batch indices its framework would accept)
    feed = _feed(c if done and done.moved else m, inputs, r, seed, v)
    if feed is None:
        return v
    _check_and_run(m, v, feed, rows, node_seconds, say)
    if v.problems or done is None or not done.moved:
        return v
    say("running what `ort-roi convert` makes of it on the same inputs, both timed")
    t = time.perf_counter()
    shapes.annotate(c)
    v.effect = convert_effect(m, c, done, feed, progress=say)
    say(f"the converted graph compared and timed ({time.perf_counter() - t:.1f} s)")
    return v


def _feed(m: onnx.ModelProto, given: dict[str, np.ndarray] | None, r: int, seed: int,
          v: Validation) -> dict[str, np.ndarray] | None:
    """The inputs: the given ones, the others generated for ``m`` to fit them (their numbers
    of images and boxes); None (a problem in ``v``) when they cannot be generated."""
    try:
        feed = generate_inputs(m, r, seed, given)
    except GivenInputsUnfit as e:  # the user's arrays do not fit the graph's declarations
        v.problems.append(("inputs", f"--inputs: {e}"))
        return None
    except Exception as e:  # noqa: BLE001 - the generator's limit, not the model's failure
        v.problems.append(("inputs", f"cannot generate inputs for this graph ({first_line(e)}): "
                                     f"{OWN_INPUTS}"))
        return None
    v.given = sorted(given or {})
    return feed


def plain_session_check(m: onnx.ModelProto, v: Validation) -> int:
    """Name every RoI node a plain session cannot run as it is and what to do (convert only
    where it makes the graph run: else the nodes no runtime here provides); then ask
    onnxruntime itself (validate, and info's ``tried.tried_run``).

    Args:
        m: the graph.
        v: the answer: its problems and notes are added to, ``runnable`` set.

    Returns:
        the number of RoI nodes.
    """
    missing = unprovided(m)
    lack = ", ".join(f"{k} ({c} node{'s' * (c > 1)})" for k, c in missing.items())

    def fix(does: str) -> str:  # convert, where it makes the graph run; else what it lacks
        if not missing:
            return f"{CONVERT}, which {does}"
        return (f"`ort-roi convert` {does}, but no runtime here runs {lack} (neither "
                f"onnxruntime nor ort_roi, before or after convert): the graph needs the runtime "
                f"it was exported for")

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
            omits = [a.name for a in f.spec.attrs if a.name not in given_attrs(node)]
            if omits:
                v.problems.append(("plain session", f"{what} omits the attribute(s) "
                                   f"{', '.join(omits)}; onnxruntime requires every "
                                   f"attribute of a Python op: {fix('writes their defaults')}"))
        elif f.guard_levels:
            v.problems.append(("plain session", f"{what}: the exported node has a variable "
                               f"number of inputs and list attributes, which a Python op "
                               f"cannot declare; {fix(FIXED_ARITY)}"))
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
                               (f"; {fix('rewrites its RoI nodes')}" if n or missing else "")))
    v.runnable = not v.problems
    return n


def _declared_shapes(m: onnx.ModelProto) -> None:
    """ort_roi's nodes whose declared input shapes contradict their op: the first raised (on
    every onnx, as info and convert say it; onnx's checker says it only from 1.19, with
    ort_roi's schemas)."""
    errors = shapes.declared_shape_errors(m)
    if errors:
        raise ValueError(errors[0])


def _check_and_run(m: onnx.ModelProto, v: Validation, feed: dict[str, np.ndarray] | None,
                   rows: int, node_seconds: float, say: Callable[[str], None]) -> None:
    if feed is None:  # (the generator's limit, in v.problems)
        return
    steps = [("checker", lambda: (_declared_shapes(m), _check(m, v.notes))),
             ("shapes", lambda: onnx.shape_inference.infer_shapes(m, check_type=True,
                                                                  strict_mode=True))]
    for step, fn in steps:
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the first failure is the finding
            v.problems.append((step, first_line(e)))
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
        say(f"running it in onnxruntime on generated inputs, the inputs and outputs of "
            f"{len(nodes)} RoI node(s) exposed")
        seen, errors = run_exposing(
            m, list(dict.fromkeys(x for n in nodes for x in [*n.input, *n.output] if x)), feed)
    except Exception as e:  # noqa: BLE001 - onnxruntime's whole message is the finding
        v.problems.append(("run", f"{type(e).__name__}: {str(e).strip()}"))
        return
    wrong = feed_problems(m, seen, set(feed) - set(v.given))
    if wrong:  # the generator's mistake, not the model's: what the run logged follows from it
        v.problems += [("inputs", f"cannot generate inputs for this graph ({msg}): {OWN_INPUTS}")
                       for msg in wrong]
        return
    v.problems += [("run", msg) for msg in errors]
    if errors:
        return
    say(f"ran in {time.perf_counter() - t:.1f} s")
    shapes = ", ".join(f"{k} {list(a.shape)}" for k, a in feed.items())
    mine = sorted(set(v.given) & set(feed))
    v.notes.append((f"inputs ({shapes}; all given)" if len(mine) == len(feed) else
                    f"inputs ({shapes}; {', '.join(mine)} given, the rest generated)" if mine
                    else f"generated inputs ({shapes})") + ": onnxruntime runs it" +
                   ("; each RoI node above compared with its definition (ort_roi.definitions) "
                    "on the inputs the run fed it" if nodes else ""))
    onnx_opset = opset(m) or 1
    for i, node in enumerate(nodes, 1):
        t = time.perf_counter()
        say(f"node {i}/{len(nodes)} {node_label(node)!r}: comparing with its definition")
        ok, line = compare_node(node, seen, onnx_opset, rows, node_seconds)
        if ok:
            v.compared.append(line)
        elif ok is None:
            v.unexercised.append(line)
        else:
            v.problems.append(("definition", line))
        said = {True: "OK", None: "not exercised", False: "FAILED"}[ok]
        say(f"node {i}/{len(nodes)}: {said} ({time.perf_counter() - t:.1f} s)")


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
        rest = copy_model(inferred)
        del rest.graph.output[:]
        rest.graph.output.extend(o for o in inferred.graph.output if o.name not in still)
        onnx.checker.check_model(rest, full_check=True)
    else:
        notes.append(f"{head}: checked with the inferred shapes")
        onnx.checker.check_model(inferred, full_check=True)


def cmd_validate(args: argparse.Namespace) -> int:
    """Does a plain onnxruntime session with ort_roi.session_options() run MODEL as it is,
    does each RoI node compute its definition, and what would `ort-roi convert` change? Every
    RoI node it cannot run is named with what to do; then onnx's checker, shape inference, and
    one onnxruntime run with generated inputs (--inputs: yours) whose RoI nodes' inputs and
    outputs are captured: each node's definition (ort_roi.definitions) recomputes some of its
    rows from those inputs (--rows, --node-seconds), compared with what onnxruntime computed.
    Where convert would change the graph, the converted graph runs on the same inputs, its
    outputs compared and both timed. Verdicts and exit status: OK 0; FAILED 1; DIFFERS 3 (a
    plain session runs it, but not as the exporter's framework computes it: run convert);
    UNCHECKED 4 (inputs for the graph could not be generated: give --inputs). Several models:
    the worst verdict's status."""
    paths = model_files(args.models)
    if not paths:
        print(f"ort-roi validate: no .onnx file in {', '.join(args.models)}", file=sys.stderr)
        return 1
    given = None
    if args.inputs:
        given = read_inputs(args.inputs)
        if isinstance(given, str):
            print(f"ort-roi validate: --inputs {args.inputs}: {given}", file=sys.stderr)
            return 1
    verdicts = []
    for path in paths:
        start = time.perf_counter()

        def progress(msg: str) -> None:
            print(f"ort-roi validate: {path}: {msg} [{time.perf_counter() - start:.0f} s]",
                  file=sys.stderr, flush=True)

        v = validate(path, r=args.rois, rows=args.rows, node_seconds=args.node_seconds,
                     progress=progress if args.verbose else None, inputs=given)
        print_validation(path, v, inputs_file=args.inputs)
        verdicts.append(v.verdict)
    return EXIT[min(verdicts, key=list(EXIT).index)]


def read_inputs(path: str) -> dict[str, np.ndarray] | str:
    """The arrays of a NumPy .npz file (``numpy.savez``), by name.

    Args:
        path: the file.

    Returns:
        name -> array; or the words saying why it cannot be read (no such file, a folder,
        not an .npz file, a damaged one).
    """
    p = pathlib.Path(path)
    if not p.exists():
        return "no such file"
    if p.is_dir():
        return "a folder, not a NumPy .npz file"
    if not zipfile.is_zipfile(p):
        return ("not a NumPy .npz file (numpy.savez writes one: graph input name -> array; "
                "this file is not a zip archive)")
    try:
        with np.load(p, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except Exception as e:  # noqa: BLE001 - a damaged archive or an object array: say so
        return f"cannot read it as a NumPy .npz file ({first_line(e)})"


def model_files(paths: list[str]) -> list[str]:
    """The files named, a folder standing for the .onnx files in it (sorted)."""
    out: list[str] = []
    for p in paths:
        d = pathlib.Path(p)
        out += sorted(map(str, d.glob("*.onnx"))) if d.is_dir() else [p]
    return out


def add_command(sub) -> None:
    """Attach validate to the ort-roi parser."""
    p = sub.add_parser("validate", help=cmd_validate.__doc__, description=cmd_validate.__doc__)
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="ONNX files, or folders (their .onnx files)")
    p.add_argument("--rois", type=POSITIVE_INT, default=6,
                   help="boxes in the generated inputs where no declared size fixes them")
    p.add_argument("--rows", type=POSITIVE_INT, default=ROWS,
                   help=f"the most rows (boxes) of each RoI node compared with its "
                        f"definition, evenly spaced (default {ROWS})")
    p.add_argument("--node-seconds", type=SECONDS, default=NODE_SECONDS,
                   help=f"time for each node's comparison; past it the rows compared so far "
                        f"are reported (default {NODE_SECONDS:g})")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="your own inputs (numpy.savez: graph input name -> array); inputs it "
                        "does not hold are generated")
    p.add_argument("--verbose", action="store_true",
                   help="progress on stderr: each step and how long it took")
    p.set_defaults(fn=cmd_validate)
