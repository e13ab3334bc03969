"""Flags and files every ``ort-roi`` command reads (issue 61, item 5): a value out of range is
a usage error (exit status 2, one line naming the flag and the value), never a traceback or
a verdict about the model; an ``--inputs`` file that is no .npz, or whose arrays match no
graph input, is named with what it lacks; export-paddle checks its output folder and its
opset before paddle2onnx runs."""

import os

import numpy as np
import onnx
import pytest

from ort_roi.cli import main as cli
from tests.test_verdicts import _pooling


def _save(tmp_path, m, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("argv, flag, value", [
    (["validate", "M", "--rows", "-3"], "--rows", "-3"),
    (["validate", "M", "--rows", "0"], "--rows", "0"),
    (["validate", "M", "--rois", "-2"], "--rois", "-2"),
    (["validate", "M", "--node-seconds", "-1"], "--node-seconds", "-1"),
    (["validate", "M", "--node-seconds", "nan"], "--node-seconds", "nan"),
    (["export-paddle", "P", "out.onnx", "--opset", "99"], "--opset", "99"),
    (["export-paddle", "P", "out.onnx", "--opset", "7"], "--opset", "7"),
    (["export-paddle", "P", "out.onnx", "--timeout", "-5"], "--timeout", "-5"),
])
def test_a_bad_flag_value_is_a_one_line_usage_error(argv, flag, value, capsys):
    """Before: --rows -3 printed NumPy's traceback, --rois -2 answered UNCHECKED, and
    --node-seconds -1, --opset 7 were taken (paddle2onnx wrote opset 10; 99 aborted it)."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"ort-roi {argv[0]}: error: argument {flag}: ") and value in err, err


def test_inputs_that_are_not_an_npz_file_are_named_so(tmp_path, capsys):
    """Before: NumPy's 'allow_pickle' message for an .onnx file given as --inputs."""
    path = _save(tmp_path, _pooling())
    assert cli.main(["validate", path, "--inputs", path]) == 1
    err = capsys.readouterr().err
    assert f"--inputs {path}: not a NumPy .npz file" in err and "pickle" not in err, err
    assert cli.main(["validate", path, "--inputs", str(tmp_path / "none.npz")]) == 1
    assert "none.npz: no such file" in capsys.readouterr().err


def test_inputs_whose_names_match_no_graph_input_are_named_with_what_they_lack(tmp_path,
                                                                                 capsys):
    """Before: the verdict line asked to 'give your own with --inputs FILE.npz' though one
    was given."""
    path = _save(tmp_path, _pooling())
    npz = str(tmp_path / "wrong.npz")
    np.savez(npz, image=np.zeros((1, 8, 40, 48), np.float32))
    assert cli.main(["validate", path, "--inputs", npz]) == 4
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first == (f"{path}: UNCHECKED: the inputs given ({npz}) do not fit this graph (no "
                     f"finding about the model)"), out
    assert "give your own" not in out, out
    assert "--inputs holds 'image', not input(s) of this graph (its inputs: x, boxes, batch); " \
           "it lacks 'x', 'boxes', 'batch'" in out, out


def test_export_paddle_checks_its_output_folder_first(tmp_path, capsys):
    """Before: paddle2onnx ran, then '[Errno 2] No such file or directory'. Now convert's
    words, before anything runs (no Paddle program is needed to see it)."""
    out = str(tmp_path / "missing" / "out.onnx")
    assert cli.main(["export-paddle", str(tmp_path / "model"), out]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"ort-roi export-paddle: cannot write the output {out}: its folder "
                           f"{os.path.dirname(out)} does not exist"), err
