"""The geometry of RoI pooling: where a box lies on the map, its bins, the sample positions in
a bin and each sample's bilinear taps. Written once, in T (the input's float type, as the
reference kernels compute), and used by the definitions (``ort_roi.definitions``), the NumPy
kernels and the CUDA backend's rows. Every function takes arrays of boxes; a definition passes
one box at a time.

One module per family of ops, every public name re-exported here (``from ort_roi.geometry
import align_bins``):

- ``boxes``: where a box lies, the RoIAlign family's variants (``BoxGeometry``: ``ALIGNED``,
  ``LEGACY``, OpenVINO's, mmdeploy's), its bins (``align_bins``) and their samples per side
  (``sampling_grid``), mmdeploy's rescale;
- ``sampling``: RoIAlign's samples: their positions, neighbours and taps;
- ``separable``: a bin's mean 1-D weights (RoIAlign's average as Ay @ X @ Ax.T);
- ``pooling``: integer bins (ROIPooling max, RoIPool, Paddle's psroi_pool) and ROIPooling's
  bilinear method (OpenVINO, ``bilinear_pool_*``);
- ``torchvision``: torchvision's position-sensitive ops' C int arithmetic;
- ``rotated``: rotated boxes (mmcv roi_align_rotated; mmdeploy's multi-level plugin's rows);
- ``crop_and_resize``: TensorFlow's crop_and_resize (``crop_and_resize_*``).

One name, one meaning: the unprefixed words are RoIAlign's (``sample_positions``,
``neighbours``, ``sample_taps``); another family's own arithmetic carries its name
(``bilinear_pool_neighbours``, ``crop_and_resize_neighbours``). "crop" alone is the window
of the map a box's weights cover (``crop_weights``). The level rules of the multi-level ops
are in ``ort_roi.levels``; the tuning constant ``sampling.SAMPLES_PER_PIXEL`` is read (and
patched) in its module.

The semantics each op builds from these pieces: docs/semantics.md.
"""

from .boxes import (ALIGNED, FLT_MAX, LEGACY, MMCV_EMPTY_MAX, MMDEPLOY_ALIGNED,
                    ONNX_HALF_PIXEL, ONNX_OUTPUT_HALF_PIXEL, OPENVINO_ALIGNED, AlignBins,
                    BoxGeometry, align_bins, box_extent, level_scales, mmdeploy_rescale,
                    onnx_geometry, roi_align_geometry, sampling_grid)
from .crop_and_resize import (crop_and_resize_nearest_index, crop_and_resize_neighbours,
                              crop_and_resize_positions)
from .few import roi_pool_bins_few
from .pooling import (bilinear_pool_neighbours, bilinear_pool_positions, clip_edges,
                      max_pool_bins, psroi_bins, psroi_box_bins, roi_pool_bins,
                      round_half_away)
from .rotated import ROTATED_ROW, mmdeploy_rotated_rows, rotated_rows, rotated_samples
from .sampling import bilinear_weights, max_sample_positions, neighbours, sample_positions, \
    sample_taps
from .separable import EXPLICIT_GRID_MAX, axis_weights, crop_weights
from .torchvision import INT_MIN, c_int, torchvision_psroi_bins, torchvision_sample_grid, \
    wrap_int32

__all__ = [
    # boxes
    "BoxGeometry", "ALIGNED", "LEGACY", "OPENVINO_ALIGNED", "MMDEPLOY_ALIGNED",
    "ONNX_HALF_PIXEL", "ONNX_OUTPUT_HALF_PIXEL", "MMCV_EMPTY_MAX", "FLT_MAX",
    "roi_align_geometry", "onnx_geometry", "AlignBins", "align_bins", "sampling_grid",
    "level_scales",
    "box_extent", "mmdeploy_rescale",
    # sampling
    "sample_positions", "neighbours", "sample_taps", "max_sample_positions",
    "bilinear_weights",
    # separable
    "EXPLICIT_GRID_MAX", "axis_weights", "crop_weights",
    # pooling
    "round_half_away", "clip_edges", "max_pool_bins", "roi_pool_bins", "roi_pool_bins_few",
    "psroi_bins", "psroi_box_bins",
    "bilinear_pool_positions", "bilinear_pool_neighbours",
    # torchvision
    "INT_MIN", "c_int", "wrap_int32", "torchvision_psroi_bins", "torchvision_sample_grid",
    # rotated
    "ROTATED_ROW", "rotated_rows", "rotated_samples", "mmdeploy_rotated_rows",
    # crop_and_resize
    "crop_and_resize_positions", "crop_and_resize_neighbours", "crop_and_resize_nearest_index",
]
