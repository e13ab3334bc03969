"""A test template per op family (as torchvision's ``RoIOpTester``): ``RoIOpTester``, driven by
the op's ENTRY, checks

- the kernel the op's nodes call (``ENTRY.node`` where the nodes' attributes are not the
  kernel's keywords, as the multi-level ops' spatial_scale_0 .. against the kernel's
  spatial_scales; else ``ENTRY.kernel``) against the op's readable definition
  (``ENTRY.definition``, through ``ops.define``: the attributes its spec resolves) on the
  subclass's cases, each case computed by the spec its ``"op"`` names (a multi-level op has
  one per number of feature maps);
- the bridge, exactly: every registered node form of the op (each number of levels, each
  exporter's domain) through a plain onnxruntime session, in float32 and float64 features
  and boxes (with int32 and int64 counts where the op has counts), against the same kernel
  called directly: equal arrays (``np.array_equal``, NaN in the same places), of X's dtype;
- boxes (the spec's ``boxes_input``, wherever the op keeps them) of the other float type
  refused with RoiOpError naming the op and the boxes input;
- non-contiguous inputs (torchvision's case: channels-last feature maps, Fortran-ordered and
  strided boxes and counts) computing exactly what their contiguous copies do, through the
  kernel and through a plain session;
- the framework's committed outputs (``tests/goldens``, the subclass's ``GOLDEN_SUITE``)
  through a plain session (``check_golden``, which tests/test_goldens.py runs too);
- the bad-input catalogue (``tests/test_bad_inputs.CATALOGUE``, its entries for the
  subclass's ``CATALOGUE_KEY``): the front door raises RoiOpError naming the op, the input
  and the value; a plain session survives, logs it, and keeps computing.

A new op's tests are a subclass plus its cases::

    class TestMyOp(RoIOpTester):
        MODULE = "my_op"                 # ort_roi/ops/my_op.py: its ENTRY drives the rest
        CASES = C.my_op_cases()[::8]     # dicts with "op", "inputs" (by input name), "attrs"
        CATALOGUE_KEY = "MyOp"           # its entries in test_bad_inputs.CATALOGUE, if any
        GOLDEN_SUITE = "my_op"           # its tests/goldens/<suite>.npz, if any

(a multi-level op's cases name their spec in "op", e.g. "PyramidRoIAlign_L3", and give the
nodes' attributes, e.g. spatial_scale_0 .. spatial_scale_2), and the module that holds it
imports ``pytest_generate_tests`` from here (it parametrizes each test by the subclass's
lists).
"""

from __future__ import annotations

import functools
import importlib
import json

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from ort_roi import builders, ops
from tests import test_bad_inputs as catalogue
from tests.conftest import load_golden, ordered, run_plain, tolerance

FLOATS = (np.float32, np.float64)
COUNTS = (np.int32, np.int64)


def check_golden(suite: str, case: dict) -> None:
    """One committed framework output (tests/goldens/<suite>.npz) against a plain
    onnxruntime session of the op."""
    inputs = ordered(case)
    got = run_plain(case["op"], inputs, case["attrs"])
    expected = case["expected"]
    if case["nan_to_zero"]:  # deliberate divergence: Paddle's 0/0 is our 0
        expected = np.nan_to_num(expected, nan=0.0)
    assert got.dtype == list(inputs.values())[0 if "X" in inputs else 2].dtype
    assert got.shape == expected.shape
    tol = tolerance(case["op"], case["attrs"], got.dtype)
    if suite == "roi_pooling_bilinear" and got.dtype == np.float64:
        tol = dict(rtol=1e-5, atol=1e-5)  # OpenVINO's CPU plugin computes float64 in float32
    np.testing.assert_allclose(got, expected, **tol)


@functools.lru_cache(maxsize=None)
def _session(domain: str, op_type: str, attrs_json: str, dtype: str, count_dtype: str):
    m = builders.single_op_model(op_type, np.dtype(dtype), np.dtype(count_dtype), domain=domain,
                                 **json.loads(attrs_json))
    return ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def _as(inputs: dict, spec, dtype, count_dtype) -> list:
    """The case's inputs in the spec's order, its T inputs as ``dtype``, its I inputs as
    ``count_dtype``.

    Args:
        inputs: the case's arrays by input name.
        spec: the OpSpec that computes the case.
        dtype: the float type of the T inputs.
        count_dtype: the integer type of the I inputs.

    Returns:
        The arrays, one per spec input, in its order.
    """
    types = {"T": dtype, "I": count_dtype}
    return [inputs[i.name].astype(types[i.type]) for i in spec.inputs]


def non_contiguous(a: np.ndarray) -> np.ndarray:
    """A view of a copy of ``a`` with ``a``'s values that is not C-contiguous (torchvision's
    non-contiguous case): a feature map [N, C, H, W] channels-last in memory, a matrix
    Fortran-ordered, a vector (or what those leave contiguous: one channel, one row) every
    other element along its last axis of a buffer twice its size.

    Args:
        a: an array.

    Returns:
        An array equal to ``a``, not C-contiguous where ``a`` has more than one element.
    """
    if a.ndim == 4:
        v = np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    elif a.ndim == 2:
        v = np.asfortranarray(a)
    else:
        v = a
    if v.flags.c_contiguous and a.ndim:  # one channel, one row, a vector: every other
        v = np.repeat(a, 2, axis=-1)[..., ::2]
    return v


def outputs(y) -> list:
    """A kernel's, a definition's or a session's output(s) as a list of arrays.

    Args:
        y: one array, or a tuple or list of them (an op of several outputs).

    Returns:
        The arrays, in the op's output order.
    """
    return [np.asarray(a) for a in y] if isinstance(y, (tuple, list)) else [np.asarray(y)]


def assert_same(got, want) -> None:
    """The same array: dtype, shape, every value, NaN in the same places.

    Args:
        got: the array under test.
        want: the array it must equal.
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                  want.dtype, want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN in other places"
    assert np.array_equal(got, want, equal_nan=True), np.abs(got - want).max()


class RoIOpTester:
    """The template: a subclass names its op's module and its cases (module docstring)."""

    MODULE: str = ""
    CASES: list = []
    CATALOGUE_KEY: str | None = None
    GOLDEN_SUITE: str | None = None
    #: Where the kernel is known to compute a non-contiguous input otherwise than its
    #: contiguous copy (reported, not yet fixed): why. The test then xfails on exactly that,
    #: and fails once the kernel is fixed (delete the reason then).
    NON_CONTIGUOUS_KNOWN: str | None = None

    @classmethod
    def entry(cls):
        """The op's entry (``ort_roi.ops.<MODULE>.ENTRY``)."""
        return importlib.import_module(f"ort_roi.ops.{cls.MODULE}").ENTRY

    @classmethod
    def spec(cls, case: dict):
        """The spec that computes ``case``.

        Args:
            case: one of CASES.

        Returns:
            The entry's spec named by the case's "op" (a multi-level op's, of the case's
            number of feature maps), else the entry's spec.
        """
        e = cls.entry()
        return next((s for s in e.specs if s.name == case.get("op")), e.spec)

    @classmethod
    def kernel(cls):
        """What the op's registered nodes call: ``ENTRY.node`` (the nodes' attributes, e.g.
        spatial_scale_0 .., gathered into the kernel's keywords, e.g. spatial_scales) where
        the entry has one, else ``ENTRY.kernel``."""
        e = cls.entry()
        return e.node or e.kernel

    @classmethod
    def bridged(cls) -> list:
        """Each registered node form of the op with the first case its spec computes.

        Returns:
            [(NodeForm, case)]: every form the bridge runs as it is (one per number of
            levels, one per exporter domain) that some case exercises.
        """
        out = []
        for f in cls.entry().forms:
            case = next((c for c in cls.CASES if cls.spec(c) is f.spec), None)
            if f.registered and case is not None:
                out.append((f, case))
        return out

    @classmethod
    def params(cls) -> dict:
        """Each test argument's values (and their ids), from the entry and the subclass."""
        spec = cls.entry().spec
        counts = COUNTS if any(i.type == "I" for i in spec.inputs) else COUNTS[-1:]
        return {
            "case": (cls.CASES, [f"{i}-{c['name']}" for i, c in enumerate(cls.CASES)]),
            "bridged": (cls.bridged(), [f"{f.domain}::{f.op_type}" for f, _ in cls.bridged()]),
            "dtype": (FLOATS, [np.dtype(d).name for d in FLOATS]),
            "count_dtype": (counts, [np.dtype(d).name for d in counts]),
            "golden": (load_golden(cls.GOLDEN_SUITE) if cls.GOLDEN_SUITE else [],
                       lambda c: c["name"]),
            "bad": ([c for c in catalogue.CATALOGUE if c.op == cls.CATALOGUE_KEY],
                    lambda c: f"{c.op}: {c.id}"),
        }

    @classmethod
    def boxed_case(cls) -> dict:
        """The first case with boxes (R > 0)."""
        return next(c for c in cls.CASES
                    if len(c["inputs"][cls.spec(c).boxes.name]))

    def test_kernel_matches_definition(self, case, dtype):
        """The kernel as the definition, in both float types."""
        spec = self.spec(case)
        inputs = _as(case["inputs"], spec, dtype, COUNTS[-1])
        got = outputs(self.kernel()(*inputs, **case["attrs"]))
        want = outputs(ops.define(spec, *inputs, **case["attrs"]))
        assert len(got) == len(want) == len(spec.outputs)
        for g, w, o in zip(got, want, spec.outputs):
            assert g.dtype == w.dtype == o.dtype(dtype) and g.shape == w.shape, o.name
            np.testing.assert_allclose(g, w, **tolerance(spec.name, case["attrs"], dtype))

    def test_the_bridge_computes_what_the_kernel_does(self, bridged, dtype, count_dtype):
        """Every registered node form, every float type with every count type through a
        plain session: the kernel's values exactly (the bridge moves arrays, it computes
        nothing), of X's dtype."""
        form, case = bridged
        spec = self.spec(case)
        inputs = _as(case["inputs"], spec, dtype, count_dtype)
        sess = _session(form.domain, form.op_type, json.dumps(case["attrs"], sort_keys=True),
                        np.dtype(dtype).name, np.dtype(count_dtype).name)
        got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))
        want = outputs(self.kernel()(*inputs, **case["attrs"]))
        assert len(got) == len(want) == len(spec.outputs)
        for g, w, o in zip(got, want, spec.outputs):
            assert g.dtype == o.dtype(dtype), o.name
            assert_same(g, w)

    def test_boxes_of_the_other_float_type_are_refused(self, dtype):
        """Boxes (the spec's boxes input, wherever the op keeps them) must have X's dtype:
        RoiOpError naming the op, the boxes input and both dtypes."""
        case = self.CASES[0]
        spec = self.spec(case)
        other = FLOATS[1 - FLOATS.index(dtype)]
        inputs = _as(case["inputs"], spec, dtype, COUNTS[-1])
        i = spec.boxes_input
        inputs[i] = inputs[i].astype(other)
        with pytest.raises(ort_roi.RoiOpError) as err:
            self.kernel()(*inputs, **case["attrs"])
        msg = str(err.value)
        assert err.value.op == spec.name
        for fragment in (f"input '{spec.boxes.name}'", np.dtype(dtype).name,
                         np.dtype(other).name):
            assert fragment in msg, (fragment, msg)

    def test_non_contiguous_inputs_compute_as_their_contiguous_copies(self, dtype):
        """torchvision's non-contiguous case: every input a non-contiguous view (channels-last
        maps, Fortran-ordered boxes, strided vectors) gives exactly what its contiguous copy
        gives, called directly and through a plain session."""
        case = self.boxed_case()
        spec = self.spec(case)
        inputs = _as(case["inputs"], spec, dtype, COUNTS[-1])
        views = [non_contiguous(a) for a in inputs]
        for a, v in zip(inputs, views):  # what the test is about
            assert np.array_equal(a, v, equal_nan=True)
            assert a.size <= 1 or not v.flags.c_contiguous, (a.shape, v.strides)
        form = next(f for f, c in self.bridged() if f.spec is spec)
        sess = _session(form.domain, form.op_type, json.dumps(case["attrs"], sort_keys=True),
                        np.dtype(dtype).name, COUNTS[-1].__name__)
        names = [i.name for i in sess.get_inputs()]
        for g, w in zip(sess.run(None, dict(zip(names, views))),
                        sess.run(None, dict(zip(names, inputs)))):
            assert_same(g, w)
        want = outputs(self.kernel()(*inputs, **case["attrs"]))
        try:
            for g, w in zip(outputs(self.kernel()(*views, **case["attrs"])), want):
                assert_same(g, w)
        except AssertionError:
            if self.NON_CONTIGUOUS_KNOWN:
                pytest.xfail(self.NON_CONTIGUOUS_KNOWN)
            raise
        assert not self.NON_CONTIGUOUS_KNOWN, (
            f"fixed: delete {type(self).__name__}.NON_CONTIGUOUS_KNOWN")

    def test_matches_framework(self, golden):
        """The committed framework outputs (tests/goldens)."""
        check_golden(self.GOLDEN_SUITE, golden)

    def test_front_door_raises_roi_op_error(self, bad):
        """The bad-input catalogue's entries for this op, through the front door."""
        catalogue.front_door_raises(bad)

    def test_plain_session_survives_and_logs(self, bad, caplog):
        """The same entries through a plain session: it survives, logs, keeps computing."""
        catalogue.plain_session_survives(bad, caplog)


def pytest_generate_tests(metafunc):
    """Parametrize a RoIOpTester subclass's tests by its ``params()`` (import this hook into
    the module that holds the subclasses).

    Args:
        metafunc: pytest's view of the test being collected.
    """
    cls = metafunc.cls
    if cls is None or not issubclass(cls, RoIOpTester) or not cls.MODULE:
        return
    why_none = {"golden": "GOLDEN_SUITE unset: its parity with its framework is tested "
                          "outside the template",
                "bad": "CATALOGUE_KEY unset: its bad inputs are tested outside the template"
                       if cls.CATALOGUE_KEY is None else
                       f"the bad-input catalogue has no entry for {cls.CATALOGUE_KEY!r}"}
    for name, (values, ids) in cls.params().items():
        if name not in metafunc.fixturenames:
            continue
        if not values:  # said, instead of pytest's bare "got empty parameter set"
            why = why_none.get(name, f"no {name} values")
            metafunc.parametrize(name, [pytest.param(None, marks=pytest.mark.skip(
                reason=f"{cls.__name__}: {why}"))], ids=["none"])
            continue
        metafunc.parametrize(name, values, ids=ids)
