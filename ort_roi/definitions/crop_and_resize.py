"""CropAndResize: TensorFlow's ``tf.image.crop_and_resize``, one box, one output row, one
output pixel at a time, transcribed from the CPU functor of TensorFlow's kernel
(``tensorflow/core/kernels/image/crop_and_resize_op.cc``, ``CropAndResize<CPUDevice, T>``).

TensorFlow computes in float32 whatever the image's type (each image value is cast to float32
before it is used; the output is float32), the sample position of output row y of a box
[y1, x1, y2, x2] (normalized: 0 is the first row's centre, 1 the last's) as

    height_scale = (y2 - y1) * (H - 1) / (crop_height - 1)    (0 when crop_height == 1)
    in_y = y1 * (H - 1) + y * height_scale                    (crop_height > 1)
    in_y = 0.5 * (y1 + y2) * (H - 1)                          (crop_height == 1: in double,
                                                               then rounded to float32)

each operation rounded to float32 in this order (so a box ending at 1.0 may put its last row
just above H - 1), and in_x likewise. A row (column) whose position is outside [0, H - 1]
([0, W - 1]) is the extrapolation value for all its pixels. bilinear: the value between the
floor and ceil neighbours, top = tl + (tr - tl) * x_lerp, bottom = bl + (br - bl) * x_lerp,
top + (bottom - top) * y_lerp; nearest: the neighbour at roundf(in_y), roundf(in_x) (half
away from zero).

Where TensorFlow's behaviour is undefined this definition chooses: a position that is NaN
(a huge finite box: inf - inf, 0 * inf) is outside the map (TensorFlow casts NaN to int and
reads there). Box indices outside [0, N) are refused before (as TensorFlow refuses them).
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def _position(lo, hi, size: int, crop: int, scale, i: int):
    """Sample position of output index i along an axis of ``size`` pixels, in float32 as
    TensorFlow computes it (``scale`` the axis's float32 step, unused when crop == 1)."""
    if crop > 1:
        return F32(F32(lo * F32(size - 1)) + F32(F32(i) * scale))
    return F32(0.5 * float(F32(lo + hi)) * (size - 1))  # a double expression, then float


def _on_map(pos, size: int) -> bool:
    """TensorFlow's test ``pos < 0 || pos > size - 1`` negated (NaN: off the map)."""
    return bool(pos >= 0) and bool(pos <= F32(size - 1))


def _round_half_away(v) -> int:
    """roundf of a position >= 0: half away from zero."""
    f = math.floor(v)
    return int(f) + (1 if F32(v - F32(f)) >= F32(0.5) else 0)


def crop_and_resize(image: np.ndarray, boxes: np.ndarray, box_indices: np.ndarray, *,
                    crop_height: int, crop_width: int, method: str = "bilinear",
                    extrapolation_value: float = 0.0) -> np.ndarray:
    """tf.image.crop_and_resize of image [N, H, W, C] (float32 or float64) over boxes [R, 4]
    ([y1, x1, y2, x2], normalized; taken as float32) of images box_indices [R]: [R,
    crop_height, crop_width, C] float32."""
    with np.errstate(all="ignore"):  # a huge box overflows float32, as in TensorFlow
        return _crop_and_resize(image, np.asarray(boxes).astype(F32), box_indices,
                                crop_height, crop_width, method, F32(extrapolation_value))


def _crop_and_resize(image, boxes, box_indices, crop_height, crop_width, method, ext):
    N, H, W, C = image.shape
    R = boxes.shape[0]
    crops = np.empty((R, crop_height, crop_width, C), F32)
    for b in range(R):
        y1, x1, y2, x2 = boxes[b]
        b_in = int(box_indices[b])
        img = image[b_in]
        height_scale = (F32(F32(F32(y2 - y1) * F32(H - 1)) / F32(crop_height - 1))
                        if crop_height > 1 else F32(0))
        width_scale = (F32(F32(F32(x2 - x1) * F32(W - 1)) / F32(crop_width - 1))
                       if crop_width > 1 else F32(0))
        for y in range(crop_height):
            in_y = _position(y1, y2, H, crop_height, height_scale, y)
            if not _on_map(in_y, H):
                crops[b, y] = ext
                continue
            for x in range(crop_width):
                in_x = _position(x1, x2, W, crop_width, width_scale, x)
                if not _on_map(in_x, W):
                    crops[b, y, x] = ext
                    continue
                if method == "bilinear":
                    top_y, bottom_y = math.floor(in_y), math.ceil(in_y)
                    y_lerp = F32(in_y - F32(top_y))
                    left_x, right_x = math.floor(in_x), math.ceil(in_x)
                    x_lerp = F32(in_x - F32(left_x))
                    top_left = img[top_y, left_x].astype(F32)
                    top_right = img[top_y, right_x].astype(F32)
                    bottom_left = img[bottom_y, left_x].astype(F32)
                    bottom_right = img[bottom_y, right_x].astype(F32)
                    top = top_left + (top_right - top_left) * x_lerp
                    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
                    crops[b, y, x] = top + (bottom - top) * y_lerp
                else:  # nearest
                    crops[b, y, x] = img[_round_half_away(in_y),
                                         _round_half_away(in_x)].astype(F32)
    return crops
