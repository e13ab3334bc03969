"""CropAndResize's cases (TensorFlow's tf.image.crop_and_resize): what the goldens
(tools/make_tf_goldens.py -> tests/goldens/crop_and_resize.npz) and the live tests run.

Each case: name, inputs (image [N, H, W, C], boxes [R, 4] float32 [y1, x1, y2, x2],
box_indices [R] int32) and attributes (crop_height, crop_width, method,
extrapolation_value), chosen for where TensorFlow's float32 arithmetic decides: boxes that
end at 1.0 (the last sample may land above H - 1: a row of the extrapolation value), boxes
outside [0, 1], flipped boxes, crops of one row / column (the centre, computed in double),
nearest ties (half away from zero), several images, a float64 image, maps of one row.
"""

from __future__ import annotations

import numpy as np


def _image(rng, N, H, W, C, dtype=np.float32):
    return (rng.integers(-64, 64, (N, H, W, C)) / 8).astype(dtype)  # small, compressible


def _boxes(rng, R, lo=0.0, hi=1.0):
    """Random boxes with y1 <= y2, x1 <= x2 in [lo, hi]."""
    a = rng.uniform(lo, hi, (R, 2, 2))
    a.sort(axis=1)
    return np.stack([a[:, 0, 0], a[:, 0, 1], a[:, 1, 0], a[:, 1, 1]], 1).astype(np.float32)


def _overshooting(rng, n: int, size: int, crop: int) -> np.ndarray:
    """n starts lo in [0, 0.9) whose box [lo, 1.0] puts its last sample above size - 1 in
    float32 (lo*(size-1) + (crop-1)*((1-lo)*(size-1)/(crop-1)) > size - 1)."""
    f = np.float32
    lo = rng.uniform(0, 0.9, 4000).astype(f)
    s1 = f(size - 1)
    last = lo * s1 + f(crop - 1) * ((f(1) - lo) * s1 / f(crop - 1))
    return lo[last > s1][:n]


def _case(name, image, boxes, idx, ch, cw, method="bilinear", ext=0.0):
    return dict(name=name, inputs=dict(image=image, boxes=np.asarray(boxes, np.float32),
                                       box_indices=np.asarray(idx, np.int32)),
                attrs=dict(crop_height=ch, crop_width=cw, method=method,
                           extrapolation_value=ext))


def cases() -> list[dict]:
    rng = np.random.default_rng(20261125)
    out = []
    # detector boxes clipped to the image: many end at exactly 1.0
    for (H, W, crop) in ((9, 11, 7), (16, 16, 14), (38, 50, 7), (13, 17, 14)):
        b = _boxes(rng, 16)
        b[::2, 2] = 1.0
        b[::3, 3] = 1.0
        b[1::4, :2] = 0.0
        b[:4, 0], b[:4, 2] = _overshooting(rng, 4, H, crop), 1.0  # a last row off the map
        b[4:8, 1], b[4:8, 3] = _overshooting(rng, 4, W, crop), 1.0  # a last column
        out.append(_case(f"ends_at_one_{H}x{W}_{crop}", _image(rng, 2, H, W, 1), b,
                         rng.integers(0, 2, 16), crop, crop, ext=-7.0))
    # boxes reaching outside [0, 1] (rows / columns off the map), two extrapolation values
    for ext in (0.0, 2.5):
        b = _boxes(rng, 16, -0.6, 1.6)
        out.append(_case(f"outside_ext{ext}", _image(rng, 2, 8, 10, 4), b,
                         rng.integers(0, 2, 16), 5, 6, ext=ext))
        out.append(_case(f"outside_nearest_ext{ext}", _image(rng, 2, 8, 10, 4), b,
                         rng.integers(0, 2, 16), 5, 6, "nearest", ext))
    # flipped boxes: y1 > y2 and / or x1 > x2
    b = _boxes(rng, 12, -0.2, 1.2)
    b[:6] = b[:6, [2, 1, 0, 3]]
    b[3:9] = b[3:9, [0, 3, 2, 1]]
    out.append(_case("flipped", _image(rng, 1, 10, 7, 2), b, np.zeros(12), 6, 4))
    out.append(_case("flipped_nearest", _image(rng, 1, 10, 7, 2), b, np.zeros(12), 6, 4,
                     "nearest"))
    # one row / column: the centre 0.5 * (y1 + y2) * (H - 1)
    b = _boxes(rng, 10, -0.3, 1.3)
    b[0] = [0, 0, 1, 1]
    for ch, cw in ((1, 1), (1, 5), (4, 1)):
        out.append(_case(f"crop_{ch}x{cw}", _image(rng, 2, 7, 9, 3), b,
                         rng.integers(0, 2, 10), ch, cw))
        out.append(_case(f"crop_{ch}x{cw}_nearest", _image(rng, 2, 7, 9, 3), b,
                         rng.integers(0, 2, 10), ch, cw, "nearest"))
    # nearest ties: positions at k + 0.5 (H - 1 = 4 over 9 samples: steps of 0.5)
    b = np.array([[0, 0, 1, 1], [0.125, 0.25, 0.875, 0.75], [1, 1, 0, 0],
                  [0.5, 0.5, 1, 1], [0, 0.125, 0.5, 0.625]], np.float32)
    out.append(_case("nearest_ties", _image(rng, 1, 5, 9, 2), b, np.zeros(5), 9, 17,
                     "nearest", -1.0))
    # several images, boxes in any order
    out.append(_case("several_images", _image(rng, 4, 12, 9, 5), _boxes(rng, 20),
                     rng.integers(0, 4, 20), 7, 7))
    # a float64 image: TensorFlow rounds each value to float32, the output is float32
    out.append(_case("float64_image", _image(rng, 2, 9, 8, 3, np.float64) / 7,  # not float32
                     _boxes(rng, 10, -0.2, 1.1), rng.integers(0, 2, 10), 5, 5))
    out.append(_case("float64_image_nearest", _image(rng, 2, 9, 8, 3, np.float64) / 7,
                     _boxes(rng, 10, -0.2, 1.1), rng.integers(0, 2, 10), 5, 5, "nearest"))
    # maps of one row / one column (H - 1 = 0: every row samples row 0 or is off the map)
    for (H, W) in ((1, 6), (6, 1), (1, 1)):
        out.append(_case(f"map_{H}x{W}", _image(rng, 1, H, W, 2), _boxes(rng, 6, -0.5, 1.5),
                         np.zeros(6), 3, 4, ext=9.0))
    return out


def random_case(rng, method=None, dtype=np.float32) -> dict:
    """One random case (shapes, boxes partly outside, ending at 1.0, flipped)."""
    N, H, W, C = (int(v) for v in (rng.integers(1, 4), rng.integers(1, 24),
                                    rng.integers(1, 24), rng.integers(1, 6)))
    R = int(rng.integers(0, 20))
    b = rng.uniform(-0.4, 1.4, (R, 4)).astype(np.float32)
    b[: R // 3, 2:] = 1.0
    ch, cw = (int(v) for v in rng.integers(1, 16, 2))
    return _case("random", _image(rng, N, H, W, C, dtype), b, rng.integers(0, N, R), ch, cw,
                 method or ("bilinear", "nearest")[int(rng.integers(0, 2))],
                 float(np.float32(rng.choice([0.0, -1.25, 3.0]))))


def crop_model(image_dtype, boxes_dtype, index_dtype, **attrs):
    """A model of one ort_roi::CropAndResize node (output float32, as TensorFlow's) over
    inputs image, boxes, box_indices of these dtypes, every attribute written
    (onnxruntime-extensions' ops read each declared attribute)."""
    from onnx import TensorProto, helper

    from ort_roi.ops.crop_and_resize import SPEC

    onnx_type = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
                 np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64}
    attrs = SPEC.resolve(attrs)
    names = ("image", "boxes", "box_indices")
    inputs = [helper.make_tensor_value_info(n, onnx_type[np.dtype(d)], None)
              for n, d in zip(names, (image_dtype, boxes_dtype, index_dtype))]
    node = helper.make_node("CropAndResize", list(names), ["crops"], domain="ort_roi", **attrs)
    graph = helper.make_graph([node], "crop", inputs,
                              [helper.make_tensor_value_info("crops", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ort_roi", 1)],
                             ir_version=9)
