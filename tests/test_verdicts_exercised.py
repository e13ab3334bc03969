"""OK only for what was exercised (issue 61, item 2): the generated boxes reach every level
of a multi-level stage (their sizes picked by the graph's own level rule), a RoI node the
run gave no boxes is "not exercised", not OK, the verdict line counts the nodes exercised,
and a run that compared nothing is no OK."""

import os

import numpy as np
import pytest

import ort_roi
from ort_roi.cli import main as cli
from ort_roi.cli.validate import validate

DATA = os.path.join(os.path.dirname(ort_roi.__file__), "data")
STAGES = ["detectron2_stage_box_16.onnx", "torchvision_stage_14.onnx",
          "mmdeploy_stage_bbox_16.onnx"]


@pytest.mark.parametrize("name", STAGES)
def test_generated_boxes_reach_every_level_of_a_stage(name, capsys):
    """Before: levels 2-3 read 'OK: the run gave it no boxes', even with --rois 300."""
    path = os.path.join(DATA, name)
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("runs it as it is (4 of 4 RoI node(s) exercised)"), out
    assert "not exercised" not in out and "no boxes" not in out, out


def test_a_node_given_no_boxes_is_not_exercised_and_counted(tmp_path, capsys):
    """Boxes of the user's, all small: the coarse levels get none; their lines say 'not
    exercised' and the verdict line counts 2 of 4."""
    path = os.path.join(DATA, "detectron2_stage_box_16.onnx")
    rng = np.random.default_rng(0)
    f = {f"p{k}": rng.standard_normal((1, 256, 640 >> k, 896 >> k)).astype(np.float32)
         for k in range(2, 6)}
    f["boxes"] = np.array([[4, 4, 64, 64], [10, 10, 200, 150], [5, 5, 40, 30]], np.float32)
    npz = str(tmp_path / "small.npz")
    np.savez(npz, **f)
    assert cli.main(["validate", path, "--inputs", npz]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "(2 of 4 RoI node(s) exercised); the RoI nodes the run gave no boxes are not " \
           "checked" in first, out
    assert out.count(": not exercised: the run gave it no boxes") == 2, out


def test_nothing_compared_is_not_ok():
    """Before: rows=0 (--rows 0, now a usage error) said 'OK: 0 of 6 rows ... equal its
    definition'."""
    v = validate(os.path.join(DATA, "torchvision_stage_14.onnx"), rows=0)
    assert v.verdict == "UNCHECKED" and not v.compared and len(v.unexercised) == 4, v
    assert v.exercised == "0 of 4 RoI node(s) exercised"
