"""A test template per op family (as torchvision's ``RoIOpTester``): ``RoIOpTester``, driven by
the op's ENTRY, checks

- the kernel (``ENTRY.kernel``) against the op's readable definition (``ENTRY.definition``,
  through ``ops.define``: the attributes its spec resolves) on the subclass's cases;
- the dtype matrix: float32 and float64 features and boxes (with int32 and int64 counts where
  the op has counts) through a plain onnxruntime session of the op's registered node (the real
  bridge), against the kernel, the output of X's dtype; boxes of the other float type refused
  with RoiOpError naming the op and the boxes input;
- the framework's committed outputs (``tests/goldens``, the subclass's ``GOLDEN_SUITE``)
  through a plain session (``check_golden``, which tests/test_goldens.py runs too);
- the bad-input catalogue (``tests/test_bad_inputs.CATALOGUE``, its entries for the
  subclass's ``CATALOGUE_KEY``): the front door raises RoiOpError naming the op, the input
  and the value; a plain session survives, logs it, and keeps computing.

A new op's tests are a subclass plus its cases::

    class TestMyOp(RoIOpTester):
        MODULE = "my_op"                 # ort_roi/ops/my_op.py: its ENTRY drives the rest
        CASES = C.my_op_cases()[::8]     # dicts with "inputs" (by input name) and "attrs"
        CATALOGUE_KEY = "MyOp"           # its entries in test_bad_inputs.CATALOGUE, if any
        GOLDEN_SUITE = "my_op"           # its tests/goldens/<suite>.npz, if any

and the module that holds it imports ``pytest_generate_tests`` from here (it parametrizes
each test by the subclass's lists).
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
    ``count_dtype``."""
    types = {"T": dtype, "I": count_dtype}
    return [inputs[i.name].astype(types[i.type]) for i in spec.inputs]


class RoIOpTester:
    """The template: a subclass names its op's module and its cases (module docstring)."""

    MODULE: str = ""
    CASES: list = []
    CATALOGUE_KEY: str | None = None
    GOLDEN_SUITE: str | None = None

    @classmethod
    def entry(cls):
        return importlib.import_module(f"ort_roi.ops.{cls.MODULE}").ENTRY

    @classmethod
    def form(cls):
        """The op's registered node form (the one the bridge runs as it is)."""
        return next(f for f in cls.entry().forms if f.registered)

    @classmethod
    def params(cls) -> dict:
        """Each test argument's values (and their ids), from the entry and the subclass."""
        spec = cls.entry().spec
        counts = COUNTS if any(i.type == "I" for i in spec.inputs) else COUNTS[-1:]
        return {
            "case": (cls.CASES, [f"{i}-{c['name']}" for i, c in enumerate(cls.CASES)]),
            "dtype": (FLOATS, [np.dtype(d).name for d in FLOATS]),
            "count_dtype": (counts, [np.dtype(d).name for d in counts]),
            "golden": (load_golden(cls.GOLDEN_SUITE) if cls.GOLDEN_SUITE else [],
                       lambda c: c["name"]),
            "bad": ([c for c in catalogue.CATALOGUE if c.op == cls.CATALOGUE_KEY],
                    lambda c: f"{c.op}: {c.id}"),
        }

    def test_kernel_matches_definition(self, case, dtype):
        """The kernel as the definition, in both float types."""
        e = self.entry()
        inputs = _as(case["inputs"], e.spec, dtype, COUNTS[-1])
        got = e.kernel(*inputs, **case["attrs"])
        want = ops.define(e.spec, *inputs, **case["attrs"])
        assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got, want, **tolerance(e.spec.name, case["attrs"], dtype))

    def test_dtype_matrix_through_a_plain_session(self, dtype, count_dtype):
        """Every float type with every count type through the bridge: the kernel's values,
        of X's dtype."""
        e, f = self.entry(), self.form()
        case = self.CASES[0]
        inputs = _as(case["inputs"], e.spec, dtype, count_dtype)
        sess = _session(f.domain, f.op_type, json.dumps(case["attrs"], sort_keys=True),
                        np.dtype(dtype).name, np.dtype(count_dtype).name)
        got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))[0]
        want = e.kernel(*inputs, **case["attrs"])
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, **tolerance(e.spec.name, case["attrs"], dtype))

    def test_boxes_of_the_other_float_type_are_refused(self, dtype):
        """Boxes must have X's dtype: RoiOpError naming the op, the boxes input and both
        dtypes."""
        e = self.entry()
        other = FLOATS[1 - FLOATS.index(dtype)]
        inputs = _as(self.CASES[0]["inputs"], e.spec, dtype, COUNTS[-1])
        boxes = e.spec.inputs[1]
        inputs[1] = inputs[1].astype(other)
        with pytest.raises(ort_roi.RoiOpError) as err:
            e.kernel(*inputs, **self.CASES[0]["attrs"])
        msg = str(err.value)
        assert err.value.op == e.spec.name
        for fragment in (f"input '{boxes.name}'", np.dtype(dtype).name, np.dtype(other).name):
            assert fragment in msg, (fragment, msg)

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
    the module that holds the subclasses)."""
    cls = metafunc.cls
    if cls is None or not issubclass(cls, RoIOpTester) or not cls.MODULE:
        return
    for name, (values, ids) in cls.params().items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values, ids=ids)
