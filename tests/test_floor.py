"""The dependency floor: .ci/floor-constraints.txt pins exactly the lowest versions
pyproject.toml declares (CI runs the demo and the tests with them), what is installed meets
them, and what changes below onnx 1.19 (no shape inference for ort_roi's nodes)."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import onnx
import pytest
from onnx import TensorProto, helper

from ort_roi.cli import validate
from tests.versions import version

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _floors() -> dict[str, str]:
    """pyproject.toml's dependencies: name -> the version after '>='."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for dep in deps:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group()
        low = re.search(r">=\s*([\d.]+)", dep)
        assert low, f"dependency {dep!r} declares no lower bound"
        floors[name.lower()] = low.group(1)
    return floors


def _pins() -> dict[str, str]:
    lines = (ROOT / ".ci" / "floor-constraints.txt").read_text().splitlines()
    pins = [ln.split("#")[0].strip() for ln in lines]
    return dict(p.lower().split("==") for p in pins if p)


def _padded(v: str) -> tuple[int, ...]:
    return (version(v) + (0, 0, 0))[:3]


def test_the_floor_constraints_pin_exactly_the_declared_lower_bounds():
    floors, pins = _floors(), _pins()
    assert set(floors) <= set(pins), f"not pinned: {sorted(set(floors) - set(pins))}"
    for name, low in floors.items():
        assert _padded(pins[name]) == _padded(low), (name, pins[name], low)


def test_installed_versions_meet_the_declared_floor():
    for name, low in _floors().items():
        have = importlib.metadata.version(name)
        assert _padded(have) >= _padded(low), f"{name} {have} is below the floor {low}"


def test_the_checker_step_checks_a_graph_without_the_outputs_no_inference_reaches():
    """onnx's checker refuses a graph output that carries no shape, in either mode. Where
    shape inference cannot give it one (a node onnx has no inference for: ort_roi's own below
    onnx 1.19), validate's checker step raised that refusal for a model onnxruntime runs; it
    now checks the rest of the graph and says so."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Opaque", ["x"], ["z"], domain="example")], "g",
        [vi("x", TensorProto.FLOAT, [2])], [vi("y", TensorProto.FLOAT, None),
                                            vi("z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("example", 1)], ir_version=9)
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(onnx.shape_inference.infer_shapes(m))
    notes: list[str] = []
    validate._check(m, notes)
    assert len(notes) == 1 and "none could be inferred for z" in notes[0], notes
    assert "checker checked the graph without them" in notes[0]
    m.graph.node[0].op_type = "NoSuchOp"  # the rest is still checked
    with pytest.raises(onnx.checker.ValidationError, match="NoSuchOp"):
        validate._check(m, [])
