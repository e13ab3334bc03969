"""One answer from info, validate and convert (issue 61, items 3 and 4): "runs it as it is"
only after a run, a graph whose ort_roi node contradicts its declared shapes is refused by all
three, and convert is advised only where it makes the graph run."""

import onnx
import pytest

from ort_roi import builders
from ort_roi.cli import main as cli
from tests.test_verdicts import _tensorrt_export


def _align(tmp_path, scale=0.25, cols=4, name="m.onnx") -> str:
    """An ort_roi::RoIAlign of a 1x4x20x24 map; ``scale`` written as given (builders check
    it), boxes declared [R, ``cols``]."""
    node = builders.roi_align("X", "boxes", "boxes_num", "Y", name="align", pooled_height=3,
                              pooled_width=3, spatial_scale=0.25, sampling_ratio=2)
    for a in node.attribute:
        if a.name == "spatial_scale":
            a.f = scale
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 4, 20, 24]),
                                     builders.tensor("boxes", "float32", ["R", cols]),
                                     builders.tensor("boxes_num", "int64", [1])],
                            [builders.tensor("Y", "float32", ["R", 4, 3, 3])])
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("kind, words", [
    ("scale", "attribute 'spatial_scale': must be > 0, got -1.0"),
    ("cols", "input 'boxes': must have shape [R, 4], got ['R', 3]"),
])
def test_info_validate_and_convert_give_one_answer(kind, words, tmp_path, capsys):
    """Before: info said 'runs it as it is (tried: the session loads it)' for both (every run
    of the first is NaN), validate FAILED, and convert wrote the second (exit 0)."""
    path = _align(tmp_path, scale=-1.0) if kind == "scale" else _align(tmp_path, cols=3)
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "runs it as it is" not in out and "cannot run it as it is: " in out, out
    assert words in out, out
    assert cli.main(["validate", path]) == 1
    assert words in capsys.readouterr().out
    out_path = str(tmp_path / "out.onnx")
    assert cli.main(["convert", path, out_path]) == 1
    err = capsys.readouterr().err
    assert words in err, err
    import os

    assert not os.path.exists(out_path)


def test_info_says_runs_only_after_a_run(tmp_path, capsys):
    path = _align(tmp_path)
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "runs it as it is (tried: it ran on generated inputs (X [1, 4, 20, 24], boxes [6, " \
           "4], boxes_num [1]))" in out, out


def test_convert_is_advised_only_where_it_makes_the_graph_run(tmp_path, capsys):
    """MMDeploy's TensorRT export: before, validate said 'run `ort-roi convert IN OUT`' and
    then 'after `ort-roi convert`: FAILED'. Now it names what no runtime here provides, as
    info does."""
    path = str(tmp_path / "trt.onnx")
    onnx.save(_tensorrt_export(), path)
    assert cli.main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert "run `ort-roi convert" not in out, out
    assert ("`ort-roi convert` rewrites it as ort_roi's fixed-arity op, but no runtime here runs "
            "mmdeploy::GatherTopk (1 node), mmdeploy::TRTBatchedNMS (1 node) (neither "
            "onnxruntime nor ort_roi, before or after convert)") in out, out


def test_times_read_as_people_read_them():
    """Before: '7.58e+03 ms' on a whole Mask R-CNN."""
    from ort_roi.cli.verdicts import seconds

    assert [seconds(t) for t in (0.000148, 0.0124, 7.58, 10.2, 1234.5)] == \
        ["0.148 ms", "12.4 ms", "7.58 s", "10.2 s", "1234 s"]


def test_the_speed_line_never_recommends_convert_for_speed_it_did_not_show(capsys):
    """A measured slowdown is said as one, with convert advised for what it computes only
    (before: '0.148 ms as it is, 1.87 ms converted (0.08x; ...)')."""
    from ort_roi.cli.effect import Effect
    from ort_roi.cli.verdicts import Validation, print_validation
    from ort_roi.graph.rewrite import Rewrite

    e = Effect(Rewrite(), native_s=0.000148, converted_s=0.00187, rounds=5)
    print_validation("m.onnx", Validation(effect=e))
    out = capsys.readouterr().out
    assert ("speed on these inputs: 0.148 ms as it is, 1.87 ms converted (the converted graph "
            "ran 12.64x slower: it computes the same, so convert gains nothing here; median of "
            "5 interleaved rounds)") in out, out
    e.rewrite.repairs.append("1 x tf.image.crop_and_resize as tf2onnx writes it")
    print_validation("m.onnx", Validation(effect=e))
    out = capsys.readouterr().out
    assert out.startswith("m.onnx: DIFFERS: ") and "ran 12.64x slower: convert it for what it " \
        "computes, not for speed; median" in out, out


def test_convert_is_not_advised_where_what_it_writes_fails_too(tmp_path, capsys):
    """An ort_roi::RoIAlign that omits 'aligned' (a plain session refuses it; convert writes
    the default) and declares boxes [R, 3] (what convert writes fails the checker): the
    advice says convert does not make it run, not 'run `ort-roi convert IN OUT`'."""
    node = builders.roi_align("X", "boxes", "boxes_num", "Y", name="align", pooled_height=3,
                              pooled_width=3, spatial_scale=0.25, sampling_ratio=2)
    del node.attribute[[a.name for a in node.attribute].index("aligned")]
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 4, 20, 24]),
                                     builders.tensor("boxes", "float32", ["R", 3]),
                                     builders.tensor("boxes_num", "int64", [1])],
                            [builders.tensor("Y", "float32", ["R", 4, 3, 3])])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    assert cli.main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert "run `ort-roi convert" not in out, out
    assert ("`ort-roi convert` writes their defaults, but what it writes does not run either "
            "(after `ort-roi convert`, below)") in out, out
    assert "  after `ort-roi convert`: FAILED" in out, out
