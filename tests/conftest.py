import functools
import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from ort_roi import builders

GOLDENS = os.path.join(os.path.dirname(__file__), "goldens")

#: The fast lane, ``python -m pytest -m fast``: the edit-test loop's modules (the layout, the
#: docs, the errors, every golden through the bridge, the bridge, the threads, libm), marked
#: ``fast`` by module at collection; the full suite is CI's (docs/development.md: which to
#: run when). With ``-m fast`` alone the other modules are not even imported.
FAST = ("test_architecture", "test_docs", "test_errors", "test_goldens", "test_bridge",
        "test_parallel", "test_libm", "test_value_info")
#: The op families' test templates (tests/roi_op_tester.py): in the lane, their goldens.
FAMILIES = ("test_roi_align_family",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in FAST or (item.path.stem in FAMILIES
                                      and item.originalname == "test_matches_framework"):
            item.add_marker(pytest.mark.fast)


def pytest_ignore_collect(collection_path, config):
    """``-m fast``: skip importing the modules outside the lane (torch, paddle, ray ...)."""
    if (config.getoption("markexpr", "") == "fast" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")
            and collection_path.stem not in FAST + FAMILIES):
        return True
    return None


@functools.lru_cache(maxsize=None)
def _plain_session(op, attrs_json, dtype, count_dtype):
    attrs = json.loads(attrs_json)
    m = builders.single_op_model(op, np.dtype(dtype), np.dtype(count_dtype), **attrs)
    return ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def run_plain(op: str, inputs: dict, attrs: dict) -> np.ndarray:
    """Run one op through a plain onnxruntime.InferenceSession (the real bridge)."""
    arrays = list(inputs.values())
    ints = [a.dtype.name for a in arrays if np.issubdtype(a.dtype, np.integer)]
    floats = [a.dtype.name for a in arrays if np.issubdtype(a.dtype, np.floating)]
    sess = _plain_session(op, json.dumps(attrs, sort_keys=True), floats[0],
                          ints[0] if ints else "int64")
    return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], arrays)))[0]


def load_golden(suite: str) -> list[dict]:
    with np.load(os.path.join(GOLDENS, f"{suite}.npz")) as z:
        names = sorted({k.rsplit(":", 1)[0] for k in z.files})
        cases = []
        for n in names:
            meta = json.loads(str(z[f"{n}:meta"]))
            keys = [k for k in z.files if k.startswith(n + ":")]
            inputs = {k.rsplit(":", 1)[1]: z[k] for k in keys
                      if k.rsplit(":", 1)[1] not in ("meta", "expected", "openvino")}
            cases.append(dict(name=n, inputs=inputs, expected=z[f"{n}:expected"],
                              openvino=z[f"{n}:openvino"] if f"{n}:openvino" in z.files else None,
                              **meta))
        return cases


def input_order(op: str) -> list[str]:
    from ort_roi.ops import spec
    return [i.name for i in spec(op).inputs]


def ordered(case: dict) -> dict:
    return {k: case["inputs"][k] for k in input_order(case["op"])}


def tolerance(op: str, attrs: dict, dtype) -> dict:
    """Max pooling is bit-exact; averages 1e-4 (float32) / 1e-9 (float64); torchvision's ops
    1e-5 / 1e-9."""
    if op == "RoIPool" or (op == "ROIPooling" and attrs.get("method", "max") == "max"):
        return dict(rtol=0, atol=0)
    if np.dtype(dtype) == np.float64:
        return dict(rtol=1e-9, atol=1e-9)
    tv = op.startswith(("Torchvision", "PyramidRoIAlign"))
    return dict(rtol=1e-5, atol=1e-5) if tv else dict(rtol=1e-4, atol=1e-4)


# the skip summary by reason at the end of the run (tests/skips.py)
from tests.skips import pytest_terminal_summary  # noqa: E402,F401 - a pytest hook
