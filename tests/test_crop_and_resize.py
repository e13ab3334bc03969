"""CropAndResize (TensorFlow's tf.image.crop_and_resize), exact:

- the definition (TF's CPU kernel transcribed) and the NumPy kernel equal TensorFlow's output
  bit for bit on the goldens (tools/make_tf_goldens.py; boxes ending at 1.0 whose last row
  TF puts off the map, boxes outside [0, 1], flipped, 1-wide crops, nearest ties, several
  images, a float64 image, maps of one row), and live against TensorFlow when it is
  installed (the ``tensorflow`` extra);
- the kernel equals the definition bit for bit on random cases; the CUDA source, built for
  the host, equals the NumPy kernel bit for bit;
- the op through a real onnxruntime session (ort_roi.session_options());
- the bad-input catalogue: RoiOpError naming op, input or attribute and value.
"""

import json
import os
import shutil
import subprocess
import sys
from unittest import mock

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper


from tests import crop_cases  # noqa: E402
from tests.crop_cases import crop_model  # noqa: E402
from tests import fake_cupy  # noqa: E402
from tests.versions import needs_shape_inference
import ort_roi  # noqa: E402
from ort_roi.definitions.crop_and_resize import crop_and_resize as definition  # noqa: E402
from ort_roi.kernels.cpu import crop_and_resize as cpu_steps  # noqa: E402
from ort_roi.kernels.cuda import crop_and_resize as cuda_steps  # noqa: E402
from ort_roi.ops.crop_and_resize import SPEC, crop_and_resize  # noqa: E402
from tests.oracles import tf_crop_and_resize  # noqa: E402 (imports tensorflow when called)

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "goldens", "crop_and_resize.npz")


def load_goldens() -> list[dict]:
    with np.load(GOLDEN) as z:
        names = sorted({k.rsplit(":", 1)[0] for k in z.files})
        return [dict(name=n, inputs={k: z[f"{n}:{k}"] for k in ("image", "boxes", "box_indices")},
                     expected=z[f"{n}:expected"], **json.loads(str(z[f"{n}:meta"])))
                for n in names]


GOLDENS = load_goldens()
GIDS = [c["name"] for c in GOLDENS]


def _exact(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def _tf():
    return pytest.importorskip(
        "tensorflow", reason="TensorFlow not installed: pip install '.[tensorflow]'")


# -- TensorFlow: goldens and live ----------------------------------------------------------

def test_goldens_cover_what_tensorflow_decides():
    """The goldens hold boxes whose last row / column TF puts off the map (boxes ending at
    1.0), flipped boxes, nearest ties and a float64 image, as the file says."""
    assert len(GOLDENS) >= 20
    ends = [c for c in GOLDENS if c["name"].startswith("ends_at_one")]
    for c in ends:
        e, ext = c["expected"], np.float32(c["attrs"]["extrapolation_value"])
        off = (e == ext).reshape(len(e), -1).any(1)
        ending = (c["inputs"]["boxes"][:, 2:] == 1.0).any(1)
        assert off.sum() >= 4 and ending[off].all()  # only boxes ending at 1.0
    assert any(c["inputs"]["image"].dtype == np.float64 for c in GOLDENS)
    flipped = next(c for c in GOLDENS if c["name"] == "flipped")["inputs"]["boxes"]
    assert (flipped[:, 0] > flipped[:, 2]).any() and (flipped[:, 1] > flipped[:, 3]).any()


@pytest.mark.parametrize("case", GOLDENS, ids=GIDS)
def test_definition_equals_tensorflow_golden(case):
    _exact(definition(*case["inputs"].values(), **case["attrs"]), case["expected"])


@pytest.mark.parametrize("case", GOLDENS, ids=GIDS)
def test_kernel_equals_tensorflow_golden(case):
    _exact(crop_and_resize(*case["inputs"].values(), **case["attrs"]), case["expected"])


@pytest.mark.parity
@pytest.mark.parametrize("case", GOLDENS, ids=GIDS)
def test_goldens_are_what_tensorflow_computes_now(case):
    _tf()
    _exact(tf_crop_and_resize(*case["inputs"].values(), **case["attrs"]), case["expected"])


@pytest.mark.parity
@pytest.mark.parametrize("seed", range(6))
def test_definition_and_kernel_equal_tensorflow_live(seed):
    """Random shapes, boxes partly outside, ending at 1.0 or flipped; both methods; float32
    and float64 images; int32 box indices (TF's)."""
    _tf()
    rng = np.random.default_rng(seed)
    for i in range(8):
        case = crop_cases.random_case(rng, dtype=(np.float32, np.float64)[i % 2])
        want = tf_crop_and_resize(*case["inputs"].values(), **case["attrs"])
        _exact(definition(*case["inputs"].values(), **case["attrs"]), want)
        _exact(crop_and_resize(*case["inputs"].values(), **case["attrs"]), want)


# -- the kernel against the definition -----------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_kernel_equals_definition(seed):
    rng = np.random.default_rng(100 + seed)
    for i in range(4):
        case = crop_cases.random_case(rng, dtype=(np.float32, np.float64)[i % 2])
        inputs = dict(case["inputs"])
        if i == 3:
            inputs["box_indices"] = inputs["box_indices"].astype(np.int64)
            inputs["boxes"] = inputs["boxes"].astype(np.float64)  # rounded to float32
        _exact(crop_and_resize(*inputs.values(), **case["attrs"]),
               definition(*inputs.values(), **case["attrs"]))


def test_kernel_in_several_steps_and_threads_equals_definition():
    """Chunks much smaller than the work (many steps per thread, a partial last step)."""
    rng = np.random.default_rng(7)
    case = crop_cases.random_case(rng, "bilinear")
    case["inputs"]["image"] = rng.standard_normal((2, 15, 13, 37)).astype(np.float32)
    case["inputs"]["box_indices"] = rng.integers(0, 2, len(case["inputs"]["boxes"]))
    want = definition(*case["inputs"].values(), **case["attrs"])
    with mock.patch.object(cpu_steps, "CHUNK", 37 * 3):
        for threads in (1, 2):
            ort_roi.set_num_threads(threads)
            try:
                _exact(crop_and_resize(*case["inputs"].values(), **case["attrs"]), want)
            finally:
                ort_roi.set_num_threads(None)


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(3, 2), (5, 5), (9, 5), (40, 3), (2, 70), (1, 1)])
def test_kernel_in_blocks_of_boxes_rows_and_row_pieces_equals_definition(method, crop):
    """Steps of a few pixels (C = 4, CHUNK 4 x 16: 16 pixels; nearest's floor of 2048
    patched to 16 too): whole boxes per block (3x2, 1x1; 5x5: one box of two steps), rows
    of one box (9x5, 40x3), pieces of one row (2x70); 1 and 2 threads, boxes partly off the
    map, float32 and float64 images."""
    rng = np.random.default_rng(sum(crop) + len(method))
    boxes = np.concatenate([crop_cases._boxes(rng, 9), crop_cases._boxes(rng, 9, -0.4, 1.4)])
    idx = rng.integers(0, 2, len(boxes)).astype(np.int32)
    attrs = dict(crop_height=crop[0], crop_width=crop[1], method=method,
                 extrapolation_value=-3.0)
    for dtype in (np.float32, np.float64):
        image = crop_cases._image(rng, 2, 11, 13, 4, dtype)
        want = definition(image, boxes, idx, **attrs)
        with mock.patch.object(cpu_steps, "CHUNK", 4 * 16), \
                mock.patch.object(cpu_steps, "NEAREST_STEP", 16):
            for threads in (1, 2):
                ort_roi.set_num_threads(threads)
                try:
                    _exact(crop_and_resize(image, boxes, idx, **attrs), want)
                finally:
                    ort_roi.set_num_threads(None)


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_one_big_box_needs_scratch_of_a_few_steps_only(method):
    """One 4000 x 4000 crop, C = 1 (61 MiB out): the kernel's scratch is a few steps' worth
    (per-row and per-column arrays, and per step its pixel indices and two buffers), not per
    output pixel (it was 11x the output: 673 MiB; 8000 x 8000, 2.7 GiB)."""
    import tracemalloc

    image = np.random.default_rng(0).standard_normal((1, 300, 200, 1)).astype(np.float32)
    boxes = np.array([[0.1, 0.05, 0.93, 1.0]], np.float32)
    ort_roi.release_memory()
    tracemalloc.start()
    try:
        out = crop_and_resize(image, boxes, np.array([0], np.int32), crop_height=4000,
                              crop_width=4000, method=method)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (1, 4000, 4000, 1)
    assert peak - out.nbytes < 0.25 * out.nbytes, (peak, out.nbytes)


def test_float64_image_gives_float32_computed_as_tensorflow():
    """TF rounds each value of a float64 image to float32 and computes in float32."""
    rng = np.random.default_rng(1)
    image = rng.standard_normal((1, 6, 6, 2))  # float64 values not representable in float32
    boxes = np.array([[0.1, 0.2, 0.9, 1.0]], np.float32)
    got = crop_and_resize(image, boxes, np.array([0]), crop_height=4, crop_width=3)
    _exact(got, crop_and_resize(image.astype(np.float32), boxes, np.array([0]),
                                crop_height=4, crop_width=3))


def test_huge_finite_boxes_are_defined():
    """Boxes whose positions overflow float32 (inf - inf, 0 * inf: NaN, where TF reads at an
    undefined index) are off the map: the extrapolation value, no crash."""
    image = np.ones((1, 4, 5, 2), np.float32)
    boxes = np.array([[-3e38, -3e38, 3e38, 3e38], [3e38, 0, 3e38, 1], [0, 0, 1, 1]], np.float32)
    for method in ("bilinear", "nearest"):
        got = crop_and_resize(image, boxes, np.zeros(3, np.int32), crop_height=3, crop_width=3,
                              method=method, extrapolation_value=-1.0)
        _exact(got, definition(image, boxes, np.zeros(3), crop_height=3, crop_width=3,
                               method=method, extrapolation_value=-1.0))
        assert (got[:2] == -1).all() and (got[2] == 1).all()


def test_no_boxes_and_no_channels():
    image = np.zeros((2, 4, 4, 3), np.float32)
    out = crop_and_resize(image, np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                          crop_height=5, crop_width=2)
    assert out.shape == (0, 5, 2, 3) and out.dtype == np.float32
    out = crop_and_resize(np.zeros((1, 4, 4, 0)), np.array([[0, 0, 1, 1]], np.float32), [0],
                          crop_height=2, crop_width=2)
    assert out.shape == (1, 2, 2, 0)


def test_output_shapes_from_the_spec():
    assert SPEC.output_shapes([[2, 38, 50, 1024], ["R", 4], ["R"]],
                              dict(crop_height=7, crop_width=14)) == [["R", 7, 14, 1024]]
    assert SPEC.output_shapes([None, None, [5]], dict(crop_height=1, crop_width=2)) == \
        [[5, 1, 2, None]]
    with pytest.raises(ort_roi.RoiOpError, match="'image'.*rank 4"):
        SPEC.output_shapes([[2, 3, 4], None, None], dict(crop_height=1, crop_width=1))
    with pytest.raises(ort_roi.RoiOpError, match=r"'boxes'.*\[R, 4\]"):
        SPEC.output_shapes([None, ["R", 5], None], dict(crop_height=1, crop_width=1))


# -- the CUDA source, built for the host ---------------------------------------------------

@pytest.fixture(scope="module")
def host_cupy(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: cannot build the CUDA source for the host")
    fake = fake_cupy.module(fake_cupy.build(str(tmp_path_factory.mktemp("crop_host"))))
    cuda_steps._module.cache_clear()
    with pytest.MonkeyPatch.context() as mp:  # restores "cupy" only, not modules imported since
        mp.setitem(sys.modules, "cupy", fake)
        yield fake
    cuda_steps._module.cache_clear()


@pytest.mark.parametrize("case", GOLDENS, ids=GIDS)
def test_cuda_source_on_host_equals_tensorflow_golden(host_cupy, case):
    image, *rest = case["inputs"].values()
    got = crop_and_resize(host_cupy.asarray(image), *rest, **case["attrs"])
    assert isinstance(got, host_cupy.ndarray)
    _exact(np.asarray(got), case["expected"])


@pytest.mark.parametrize("cb", [8, 4, 2])
def test_cuda_source_on_host_every_channel_block(host_cupy, cb):
    rng = np.random.default_rng(cb)
    with mock.patch.object(cuda_steps, "channel_block", lambda *a: cb):
        for i in range(6):
            case = crop_cases.random_case(rng, dtype=(np.float32, np.float64)[i % 2])
            image, *rest = case["inputs"].values()
            _exact(np.asarray(crop_and_resize(host_cupy.asarray(image), *rest, **case["attrs"])),
                   crop_and_resize(image, *rest, **case["attrs"]))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_source_compiles_with_nvcc(tmp_path, arch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    src = tmp_path / "inst.cu"
    cu = os.path.join(os.path.dirname(os.path.abspath(cuda_steps.__file__)), "roi_ops.cu")
    lines = [f'#include "{cu}"']
    for t in ("float", "double"):
        lines.append(f"template __global__ void crop_and_resize<{t}, 8>(const {t}*, const int*, "
                     "const float*, float*, long long, int, int, int, int, int, int, float);")
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-fmad=false", "--resource-usage",
                        "-o", str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("Compiling entry function") == 2
    assert all(" 0 bytes spill stores" in ln for ln in r.stderr.splitlines()
               if "spill stores" in ln)


# -- a real onnxruntime session ------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in GOLDENS if c["inputs"]["image"].dtype == np.float32],
                         ids=[c["name"] for c in GOLDENS
                              if c["inputs"]["image"].dtype == np.float32])
def test_op_in_onnxruntime_session_equals_tensorflow(case):
    m = crop_model(np.float32, np.float32, np.int32, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, case["inputs"])[0]
    _exact(got, case["expected"])


def test_op_in_onnxruntime_session_float64_image_gives_float32():
    case = next(c for c in GOLDENS if c["name"] == "float64_image")
    m = crop_model(np.float64, np.float32, np.int64, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    feed = dict(case["inputs"], box_indices=case["inputs"]["box_indices"].astype(np.int64))
    _exact(sess.run(None, feed)[0], case["expected"])


@needs_shape_inference
def test_onnx_shape_inference_gives_float32_nhwc():
    """The registered schema: [R, crop_height, crop_width, C] float32, for a float64 image too."""
    from onnx import shape_inference

    from ort_roi.graph import schemas

    schemas.register()
    m = crop_model(np.float64, np.float32, np.int64, crop_height=7, crop_width=5)
    for vi, shape in zip(m.graph.input, ([2, 9, 8, 3], ["R", 4], ["R"])):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, shape))
    del m.graph.output[:]
    m.graph.output.append(helper.make_empty_tensor_value_info("crops"))
    t = shape_inference.infer_shapes(m, strict_mode=True).graph.output[0].type.tensor_type
    assert t.elem_type == TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in t.shape.dim] == ["R", 7, 5, 3]


# -- bad inputs ----------------------------------------------------------------------------

def _good():
    return dict(image=np.zeros((2, 5, 6, 3), np.float32),
                boxes=np.array([[0, 0, 1, 1], [0.2, 0.1, 0.8, 0.9]], np.float32),
                box_indices=np.array([0, 1], np.int32))


BAD = [  # (id, change to the inputs, attributes, fragments of the message)
    ("box index -1", dict(box_indices=np.array([0, -1], np.int32)), {},
     ["'box_indices'", "box 1", "-1", "[0, 2)"]),
    ("box index N", dict(box_indices=np.array([2, 0], np.int64)), {},
     ["'box_indices'", "box 0", "2", "[0, 2)"]),
    ("box indices float", dict(box_indices=np.array([0.0, 1.0])), {},
     ["'box_indices'", "int32 or int64", "float64"]),
    ("box indices one short", dict(box_indices=np.array([0], np.int32)), {},
     ["'box_indices'", "[R] = [2]", "[1]"]),
    ("box indices rank 2", dict(box_indices=np.array([[0], [1]], np.int32)), {},
     ["'box_indices'", "[2, 1]"]),
    ("image rank 3", dict(image=np.zeros((5, 6, 3), np.float32)), {},
     ["'image'", "rank 4 [N, H, W, C]", "[5, 6, 3]"]),
    ("image H 0", dict(image=np.zeros((2, 0, 6, 3), np.float32)), {},
     ["'image'", "H >= 1", "[2, 0, 6, 3]"]),
    ("image int", dict(image=np.zeros((2, 5, 6, 3), np.int32)), {},
     ["'image'", "float32 or float64", "int32"]),
    ("image float16", dict(image=np.zeros((2, 5, 6, 3), np.float16)), {},
     ["'image'", "float16"]),
    ("boxes 5 columns", dict(boxes=np.zeros((2, 5), np.float32)), {},
     ["'boxes'", "[R, 4]", "[2, 5]"]),
    ("boxes rank 1", dict(boxes=np.zeros(4, np.float32)), {}, ["'boxes'", "[R, 4]", "[4]"]),
    ("boxes NaN", dict(boxes=np.array([[0, 0, 1, 1], [0, np.nan, 1, 1]], np.float32)), {},
     ["'boxes'", "row 1", "nan"]),
    ("boxes inf", dict(boxes=np.array([[0, 0, np.inf, 1], [0, 0, 1, 1]], np.float32)), {},
     ["'boxes'", "row 0", "inf"]),
    ("boxes beyond float32", dict(boxes=np.array([[0, 0, 1e39, 1], [0, 0, 1, 1]])), {},
     ["'boxes'", "row 0", "float32", "1e+39"]),
    ("boxes int", dict(boxes=np.zeros((2, 4), np.int64)), {}, ["'boxes'", "int64"]),
    ("crop_height 0", {}, dict(crop_height=0), ["attribute 'crop_height'", ">= 1", "0"]),
    ("crop_width missing", {}, dict(crop_width=None), ["attribute 'crop_width'", "required"]),
    ("crop_width 2.5", {}, dict(crop_width=2.5), ["attribute 'crop_width'", "int", "2.5"]),
    ("method area", {}, dict(method="area"), ["attribute 'method'", "bilinear", "'area'"]),
    ("extrapolation NaN", {}, dict(extrapolation_value=float("nan")),
     ["attribute 'extrapolation_value'", "finite", "nan"]),
    ("crop side huge", {}, dict(crop_height=1 << 20), ["attribute 'crop_height'", "65536",
                                                       "1048576"]),
    ("output huge", {}, dict(crop_height=40000, crop_width=40000),
     ["attribute 'crop_height'", "[2, 40000, 40000, 3]", "elements"]),
    ("output huge from many boxes", dict(image=np.zeros((1, 1, 1, 1 << 21), np.float32),
                                         boxes=np.zeros((600, 4), np.float32),
                                         box_indices=np.zeros(600, np.int32)),
     dict(crop_height=14, crop_width=14), ["'boxes'", "[600, 14, 14, 2097152]", "elements"]),
]


@pytest.mark.parametrize("change,attrs,fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs_raise_roi_op_error(change, attrs, fragments):
    feed = dict(_good(), **change)
    a = dict(crop_height=3, crop_width=2)
    a.update(attrs)
    with pytest.raises(ort_roi.RoiOpError) as e:
        crop_and_resize(*feed.values(), **a)
    assert e.value.op == "CropAndResize"
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


def test_bad_box_index_in_a_session_is_logged_and_the_session_survives(caplog):
    import logging

    m = crop_model(np.float32, np.float32, np.int32, crop_height=3, crop_width=2)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y = sess.run(None, dict(_good(), box_indices=np.array([0, 5], np.int32)))[0]
    assert y.size == 0 or np.isnan(y).all()
    assert "CropAndResize" in caplog.text and "'box_indices'" in caplog.text
    good = sess.run(None, _good())[0]
    _exact(good, crop_and_resize(*_good().values(), crop_height=3, crop_width=2))
