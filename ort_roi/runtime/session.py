"""``session_options`` for plain onnxruntime sessions, and the ``InferenceSession`` front door.

How the front door's ``run`` knows that one of its ops failed, under any number of threads
and sessions, without guessing: onnxruntime-extensions hands a Python op its inputs and
attribute text only, never the session, the node or the run. So the front door

- creates its onnxruntime session with the sequential executor (the caller's SessionOptions
  are switched for the creation only, and given back as they were; onnxruntime's parallel
  executor would run the ops on its own pool threads). A run's nodes then all run on the
  thread that called ``run``, and ``bridge.raising`` registers that thread for the run: an op
  failing on it belongs to this run and no other, whatever other threads run meanwhile
  (other sessions, plain or front-door, or this one);
- writes its own float tokens (``attributes.FloatTokens``) into its private copy of the graph,
  a token per float attribute of each node, so the attribute text an op receives names its
  node exactly (nodes of ops without float attributes are told apart by their attributes
  and by the run's feed, ``locate``). The tokens are released when the onnxruntime session
  is gone (a ``weakref.finalize``), and handed out again only then.

Plain sessions (``session_options()``) are unchanged: an op's error is logged and its output
filled with NaN (an exception would abort the process), placed in its graph by ``locate``.
What onnxruntime itself refuses (a graph, a feed) is named in ort_roi's terms by ``diagnose``.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from .. import forksafe
from ..errors import RoiOpError
from ..graph.nodes import copy_model
from ..graph.rewrite import Rewrite, rewrite
from . import attributes, bridge, diagnose, locate


#: The session config entry that marks SessionOptions on which ort_roi's ops are registered.
REGISTERED = "ort_roi.registered"
#: onnxruntime's switch for its intra-op threads' busy-waiting between parallel nodes.
SPINNING = "session.intra_op.allow_spinning"


def session_options(so: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """onnxruntime SessionOptions with every ort_roi op registered (for plain sessions).

    A plain ``onnxruntime.InferenceSession(model, ort_roi.session_options())`` then runs
    graphs that use the ops. Bad input never aborts the process: the op logs the error on
    the ``ort_roi`` logger and returns a NaN-filled output. Registering again on the same
    SessionOptions does nothing (onnxruntime would refuse a second registration).

    One other setting, unless ``so`` already holds it: ``session.intra_op.allow_spinning``
    "0". onnxruntime's idle intra-op threads otherwise busy-wait for tens of milliseconds
    after each parallel node, on the cores ort_roi's kernels then run on: in detectron2's
    Mask R-CNN (2 cores) the fused mask stage's kernel took 27.7 ms inside the model
    against 13.9 ms alone, and the stage 20.6-22.9 ms with spinning off against
    25.7-29.1 ms with it, while the whole model's native nodes did not measurably slow
    (docs/benchmarks.md). Set it to "1" on ``so`` first to keep onnxruntime's default.

    Args:
        so: the SessionOptions to register the ops on, or None for new ones.

    Returns:
        ``so`` itself (or the new SessionOptions), the ops registered.
    """
    bridge.register()
    so = so if so is not None else ort.SessionOptions()
    if not _holds(so, REGISTERED):
        so.register_custom_ops_library(bridge.extensions().get_library_path())
        so.add_session_config_entry(REGISTERED, "1")
        if not _holds(so, SPINNING):  # the caller left it to us
            so.add_session_config_entry(SPINNING, "0")
    return so


def _holds(so: ort.SessionOptions, key: str) -> bool:
    """Whether ``so`` holds the session config entry ``key`` (onnxruntime raises for one it
    does not)."""
    try:
        so.get_session_config_entry(key)
    except RuntimeError:
        return False
    return True


def _load(model) -> onnx.ModelProto:
    """A private copy of ``model`` (a path, bytes or ModelProto); RoiOpError naming the file
    when it holds no ONNX model."""
    if isinstance(model, onnx.ModelProto):
        what, load = "the ModelProto given", lambda: copy_model(model)
    elif isinstance(model, (bytes, bytearray)):
        what, load = f"the {len(model)} bytes given", lambda: onnx.load_from_string(bytes(model))
    elif isinstance(model, (str, os.PathLike)):
        what, load = f"file {os.fspath(model)!r}", lambda: onnx.load(os.fspath(model))
    else:
        raise TypeError(f"model must be a path, bytes or onnx.ModelProto, got "
                        f"{type(model).__name__}")
    try:
        m = load()
    except OSError:  # a missing or unreadable file: the OS error names it
        raise
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and kin
        raise RoiOpError("ort_roi", "model", f"{what} cannot be read as an ONNX model "
                         f"({type(e).__name__}: {e})") from e
    if not m.HasField("graph"):  # zero bytes (and some other files) decode as an empty model
        raise RoiOpError("ort_roi", "model", f"{what} cannot be read as an ONNX model (it "
                         f"holds no graph: an empty file, or a file of another kind)")
    return m


def prepare_model(model: onnx.ModelProto, tokens: attributes.FloatTokens | None = None,
                  roialign_max: str = "sample", fuse: bool = True,
                  exporter: str | None = None) -> Rewrite:
    """The front door's preparation: the graph-rewrite pass (``graph.rewrite``: native
    RoiAlign / MaxRoiPool and the multi-level nodes into ort_roi, torchvision's
    MultiScaleRoIAlign stages fused when ``fuse``, every node form checked and its attributes
    explicit). Works in place.

    Args:
        model: the front door's private copy of the model.
        tokens: where float attributes get their tokens (that reach the kernels exactly and
            name the node); None leaves the values as they are.
        roialign_max: how ONNX RoiAlign's mode "max" is computed (as ``ort_roi.convert``).
        fuse: fuse torchvision's MultiScaleRoIAlign stages.
        exporter: who wrote the model (as ``ort_roi.convert``; None: told from the model).

    Returns:
        What the rewrite did, a ``graph.rewrite.Rewrite`` (the nodes moved, the notes).

    Raises:
        RoiOpError: naming a node it cannot take.
    """
    return rewrite(model, "ort_roi", float_token=tokens, roialign_max=roialign_max, fuse=fuse,
                   exporter=exporter)


#: Held while a caller's SessionOptions are switched or switched back (never while onnxruntime
#: makes a session: creations run in parallel); free again in a forked child.
_creating = forksafe.Lock()
#: id(so) -> [so, its own execution mode, creations under way]: SessionOptions switched to
#: the sequential executor, given back their mode when the last creation using them ends.
_switched: dict[int, list] = {}


@forksafe.in_child
def _switch_back() -> None:
    """Creations under way at a fork do not exist in the child: their SessionOptions get
    their own mode back there."""
    for so, mode, _ in _switched.values():
        so.execution_mode = mode
    _switched.clear()


@contextmanager
def _sequential(so: ort.SessionOptions) -> Iterator[None]:
    """``so`` with the sequential executor while onnxruntime makes a session from it; as it
    was afterwards. Creations from the same ``so`` at once share the switch (counted); the
    lock is held only while it is switched, so a fork meanwhile leaves the child free."""
    with _creating:
        held = _switched.get(id(so))
        if held is not None:
            held[2] += 1
        elif so.execution_mode != ort.ExecutionMode.ORT_SEQUENTIAL:
            held = _switched[id(so)] = [so, so.execution_mode, 1]
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        yield
    finally:
        if held is not None:
            with _creating:
                held[2] -= 1
                if held[2] == 0 and _switched.get(id(so)) is held:
                    so.execution_mode = held[1]
                    del _switched[id(so)]


def _keep_sequential(sess: ort.InferenceSession, so: ort.SessionOptions) -> None:
    """onnxruntime makes ``sess`` again from ``so`` in ``set_providers`` (and when it falls
    back to the CPU after a provider failed in ``run``): with the sequential executor too."""
    ref = weakref.ref(sess)  # no cycle: the session is freed as soon as it is dropped

    def set_providers(*args: Any, **kwargs: Any) -> None:
        with _sequential(so):
            type(ref()).set_providers(ref(), *args, **kwargs)

    sess.set_providers = set_providers


class InferenceSession:
    """The front door: an onnxruntime.InferenceSession with the ort_roi ops registered, that raises.

    Accepts a path, bytes or ``onnx.ModelProto``. The graph is rewritten as
    ``ort_roi.convert`` does (``roialign_max``, ``fuse`` and ``exporter`` as there; what is
    worth knowing is issued as a warning naming the node), omitted optional attributes take
    their defaults, float attributes reach the kernels exactly, and a bad input raises
    ``ort_roi.RoiOpError`` (a ValueError) naming op, node, input and
    tensor, from ``run`` instead of returning NaN, whatever other threads run meanwhile.
    ort_roi's ops are registered on ``sess_options`` (once, as ``session_options`` does, its
    intra-op threads' spinning off unless set); nothing else of it is changed, but the
    session runs with the
    sequential executor whatever its ``execution_mode`` says (that is how a run's errors
    reach it, see the module doc). Everything else is delegated to the wrapped
    ``onnxruntime.InferenceSession``.

    Args:
        model: the ONNX model: a path, bytes or ``onnx.ModelProto`` (copied, not changed).
        sess_options: onnxruntime SessionOptions, or None for new ones.
        providers: onnxruntime's execution providers (default ``["CPUExecutionProvider"]``;
            where the ort_roi ops compute is ``ort_roi.set_backend``'s choice).
        roialign_max: how ONNX RoiAlign's mode "max" is computed, as ``ort_roi.convert``:
            "sample" (the largest bilinear sample) or "onnx" (as onnxruntime).
        fuse: fuse torchvision's exported MultiScaleRoIAlign stages and per-box Loops.
        exporter: who wrote the model, as ``ort_roi.convert``: None (told from the model),
            a name of its exporters (their repairs apply) or "none".
        **kw: passed on to ``onnxruntime.InferenceSession``.

    Raises:
        RoiOpError: a model that cannot be read, a node the rewrite cannot take, or a graph
            onnxruntime refuses (an input type an op has no kernel for is named).
        OSError: a model file that is missing or unreadable.
        TypeError: ``model`` is not a path, bytes or ``onnx.ModelProto``.
    """

    def __init__(self, model, sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, *, roialign_max: str = "sample",
                 fuse: bool = True, exporter: str | None = None, **kw: Any):
        m = _load(model)
        tokens = attributes.FloatTokens()
        try:
            done = prepare_model(m, tokens, roialign_max=roialign_max, fuse=fuse,
                                 exporter=exporter)
            for note in done.notes:
                warnings.warn(note, stacklevel=2)
            diagnose.check_attributes(m)
            so = session_options(sess_options)  # registers the ops on sess_options, once
            self._sess = self._create(m, so, providers, kw)
        except BaseException:
            tokens.release()
            raise
        weakref.finalize(self._sess, tokens.release)  # held while onnxruntime's session lives
        _keep_sequential(self._sess, so)
        locate.remember(self._sess, m)  # errors name the node and tensor
        self._consumers = diagnose.consumers(m)
        self._declared = diagnose.declared_inputs(m)

    @staticmethod
    def _create(m: onnx.ModelProto, so: ort.SessionOptions, providers, kw) -> ort.InferenceSession:
        """onnxruntime's session of ``m``, with the sequential executor (see the module doc)."""
        try:
            with _sequential(so):
                return ort.InferenceSession(m.SerializeToString(), so,
                                            providers=providers or ["CPUExecutionProvider"], **kw)
        except Exception as e:  # onnxruntime refused the graph: say why in our terms
            raise diagnose.type_error(m) or RoiOpError(
                "ort_roi", "model", f"onnxruntime could not load it: {e}") from e

    def run(self, output_names, input_feed, run_options=None) -> list[np.ndarray]:
        """Run like onnxruntime; raises RoiOpError if an ort_roi op rejected its input.

        Args:
            output_names: the outputs to compute (None: all).
            input_feed: graph input name -> array.
            run_options: onnxruntime RunOptions, or None.

        Returns:
            The outputs, as onnxruntime returns them: a list of NumPy arrays in the order of
            ``output_names`` (the graph's outputs for None), of their declared dtypes.

        Raises:
            RoiOpError: an ort_roi op rejected its input (naming op, node, input and
                tensor), or onnxruntime refused the feed (naming the graph input, and the op
                and input that read it).
        """
        return self._raising(lambda: self._sess.run(output_names, input_feed, run_options),
                             input_feed, lambda e: diagnose.feed_error(
                                 input_feed, e, self._declared, self._consumers))

    def _raising(self, call: Any, feed: dict | None = None, refused: Any = None) -> Any:
        """``call()`` (one run of the onnxruntime session) with the errors of our ops raised:
        an op's RoiOpError first, also when a later onnxruntime node then failed on its
        fallback output; else onnxruntime's exception, through ``refused(e)`` when given."""
        with bridge.raising(self._sess, feed) as errors:
            try:
                out = call()
            except Exception as e:
                if errors:  # an op of ours failed first; a later node failed on its output
                    raise errors[0] from e
                if refused is None:
                    raise
                raise refused(e) from e
        if errors:
            raise errors[0]
        return out

    def run_with_ort_values(self, output_names: Sequence[str],
                            input_dict_ort_values: dict[str, ort.OrtValue],
                            run_options: ort.RunOptions | None = None) -> list[ort.OrtValue]:
        """``run`` on OrtValues (onnxruntime's ``run_with_ort_values``), with ``run``'s errors.

        Args:
            output_names: the outputs to compute.
            input_dict_ort_values: graph input name -> onnxruntime.OrtValue.
            run_options: onnxruntime RunOptions, or None.

        Returns:
            The outputs as OrtValues, as onnxruntime returns them.

        Raises:
            RoiOpError: an ort_roi op rejected its input (naming op, node, input and tensor).
        """
        return self._raising(lambda: self._sess.run_with_ort_values(
            output_names, input_dict_ort_values, run_options))

    def run_with_iobinding(self, iobinding: ort.IOBinding,
                           run_options: ort.RunOptions | None = None) -> None:
        """``run`` through an IOBinding (onnxruntime's ``run_with_iobinding``), with ``run``'s
        errors.

        Args:
            iobinding: the session's ``io_binding()``, inputs and outputs bound.
            run_options: onnxruntime RunOptions, or None.

        Raises:
            RoiOpError: an ort_roi op rejected its input (naming op, node, input and tensor).
        """
        self._raising(lambda: self._sess.run_with_iobinding(iobinding, run_options))

    def run_async(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
                  callback: Any, user_data: Any,
                  run_options: ort.RunOptions | None = None) -> threading.Thread:
        """``run`` on another thread, then ``callback(outputs, user_data, err)`` as
        onnxruntime's ``run_async`` calls it (``err`` "" on success; on failure the outputs
        are [] and ``err`` the RoiOpError's or onnxruntime's message). onnxruntime's own
        run_async runs the graph on its pool threads, where an op's error would only be
        logged: this runs ``run`` on a thread of ours instead.

        Args:
            output_names: the outputs to compute (None: all).
            input_feed: graph input name -> array.
            callback: called once with (outputs, user_data, err).
            user_data: passed to ``callback``.
            run_options: onnxruntime RunOptions, or None.

        Returns:
            the thread running it (started).
        """
        def work() -> None:
            try:
                outs = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 - handed to the callback, as onnxruntime does
                callback([], user_data, str(e))
                return
            callback(outs, user_data, "")

        thread = threading.Thread(target=work, name="ort_roi.run_async", daemon=True)
        thread.start()
        return thread

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)
