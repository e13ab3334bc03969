"""The op spec table: the single source of truth for every ort_roi op.

Registration (``ort_roi.runtime.bridge``), default filling and attribute validation (here),
the graph rewrite, ONNX schemas (``ort_roi.graph.schemas``), the CLI's ``info`` and the
README's op table all read these specs. Input validation that depends on the data (ranks,
dtypes, batch indices, counts) lives in ``ort_roi.kernels.checks``. Which function computes
an op is not said here: ``ort_roi.kernels.KERNELS`` (the fast kernels) and
``ort_roi.definitions.DEFINITIONS`` (the readable definitions) map each spec's key to theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .errors import RoiOpError

DOMAIN = "ort_roi"
OPSET_VERSION = 1

#: Type constraints: name -> allowed NumPy dtypes.
TYPES: dict[str, tuple[np.dtype, ...]] = {
    "T": (np.dtype(np.float32), np.dtype(np.float64)),
    "I": (np.dtype(np.int32), np.dtype(np.int64)),
}


@dataclass(frozen=True)
class Attr:
    """One attribute: its Python type, default (``None`` = required) and valid range."""

    name: str
    type: type  # int, float or str
    default: Any = None
    min: float | None = None  # lower bound
    min_exclusive: bool = False  # True: value > min, False: value >= min
    choices: tuple = ()
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is None

    def check(self, op: str, value: Any) -> Any:
        """Return ``value`` converted to this attribute's type, or raise RoiOpError."""
        try:
            if self.type is int:
                if isinstance(value, (bool, np.bool_)) or float(value) != int(value):
                    raise ValueError
                value = int(value)
            elif self.type is float:
                value = float(np.float32(value))  # ONNX float attributes are float32
            else:
                if not isinstance(value, str):
                    raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be {self.type.__name__}, got {value!r}") from None
        if self.type is float and not np.isfinite(value):
            raise RoiOpError(op, f"attribute '{self.name}'", f"must be finite, got {value!r}")
        if self.choices and value not in self.choices:
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be one of {list(self.choices)}, got {value!r}")
        if self.min is not None:
            bad = value <= self.min if self.min_exclusive else value < self.min
            if bad:
                rel = ">" if self.min_exclusive else ">="
                raise RoiOpError(op, f"attribute '{self.name}'",
                                 f"must be {rel} {self.min:g}, got {value!r}")
        return value


@dataclass(frozen=True)
class Input:
    name: str
    type: str  # a key of TYPES
    shape: str  # for docs, e.g. "[N, C, H, W]"
    doc: str = ""


@dataclass(frozen=True)
class OpSpec:
    """One op: its inputs, attributes and output."""

    name: str
    source: str
    doc: str
    inputs: tuple[Input, ...]
    attrs: tuple[Attr, ...]
    pooled: tuple[str, str]  # the attributes giving the output's spatial size
    channels_attr: str | None = None  # attribute giving the output channels (else C of X)
    channels_per_bin: bool = False  # position-sensitive: output channels = C / (PH * PW)
    box_cols: int | tuple[int, ...] = 4  # columns of the boxes input (or the accepted ones)
    domain: str = DOMAIN
    output: str = "Y"
    output_shape_doc: str = "[R, C, PH, PW]"
    features: tuple[int, ...] = (0,)  # inputs that are feature maps (go to the GPU)
    boxes_input: int = 1  # the input holding the boxes
    extra_output: tuple[str, str] | None = None  # (name, shape doc) of a second output: rois
    same_types: bool = False  # every T input of one type (one overload per dtype)
    #: what the op outputs: "pooled" maps [R, C, PH, PW]; "keypoints" [R, K, 3] and [R, K]
    #: (K: X's channels); "image" masks [R, height, width] (the image's size an input)
    kind: str = "pooled"
    _by_name: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _resolved: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def attr(self, name: str) -> Attr:
        if not self._by_name:
            self._by_name.update({a.name: a for a in self.attrs})
        return self._by_name[name]

    def defaults(self) -> dict[str, Any]:
        return {a.name: a.default for a in self.attrs if not a.required}

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults, check every attribute, reject unknown ones. Raises RoiOpError.

        Accepted attribute sets are remembered (keyed by value and type), so a kernel
        called again with the same attributes skips the checks.
        """
        try:
            key = tuple((k, type(v), v) for k, v in given.items())
            return dict(self._resolved[key])
        except (KeyError, TypeError):  # not seen yet, or an unhashable value
            pass
        out = self._resolve(given)
        if len(self._resolved) < 256:
            try:
                self._resolved[key] = out
            except TypeError:
                pass
        return dict(out)

    def _resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(given) - {a.name for a in self.attrs}
        if unknown:
            raise RoiOpError(self.name, f"attribute '{sorted(unknown)[0]}'",
                             f"is not an attribute of {self.name} (known: "
                             f"{', '.join(a.name for a in self.attrs)})")
        out = {}
        for a in self.attrs:
            if a.name in given and given[a.name] is not None:
                out[a.name] = a.check(self.name, given[a.name])
            elif a.required:
                raise RoiOpError(self.name, f"attribute '{a.name}'", "is required but missing")
            else:
                out[a.name] = a.default
        return out

    @property
    def key(self) -> tuple[str, str]:
        """(domain, name): what the kernel and definition tables are keyed by."""
        return (self.domain, self.name)

    @property
    def per_box(self) -> bool:
        """True when the feature input holds one item per box (keypoint maps, masks)."""
        return self.kind != "pooled"

    @property
    def boxes(self) -> Input:
        return self.inputs[self.boxes_input]

    @property
    def feature(self) -> Input:
        return self.inputs[self.features[0]]

    def output_shapes(self, x_shape, boxes_shape, attrs: Mapping[str, Any]) -> list[list]:
        """The shape of each output from the input shapes (entries may be None = unknown):
        [R, C_out, PH, PW] and, with an extra output, the boxes' shape [R, cols]; a
        keypoint op's [R, K, 3] and [R, K]; an image op's [R, height, width] (its size is an
        input's value: None)."""
        r = boxes_shape[0] if boxes_shape is not None and len(boxes_shape) == 2 else None
        if self.kind == "keypoints":
            k = x_shape[1] if x_shape is not None and len(x_shape) == 4 else None
            return [[r, k, 3], [r, k]]
        if self.kind == "image":
            return [[r, None, None]]
        first = self.output_shape(x_shape, boxes_shape, attrs)
        if self.extra_output is None:
            return [first]
        return [first, [r, boxes_shape[1] if boxes_shape is not None
                        and len(boxes_shape) == 2 else None]]

    def output_shape(self, x_shape, boxes_shape, attrs: Mapping[str, Any]) -> list:
        """[R, C_out, PH, PW] from the input shapes (entries may be None = unknown)."""
        r = boxes_shape[0] if boxes_shape is not None and len(boxes_shape) == 2 else None
        if self.channels_attr:
            c = attrs.get(self.channels_attr)
        elif self.channels_per_bin:
            bins = _as_int(attrs.get(self.pooled[0])) * _as_int(attrs.get(self.pooled[1]))
            c = (x_shape[1] // bins if x_shape is not None and len(x_shape) == 4
                 and isinstance(x_shape[1], int) and bins > 0 else None)
        else:
            c = x_shape[1] if x_shape is not None and len(x_shape) == 4 else None
        return [r, c, attrs.get(self.pooled[0]), attrs.get(self.pooled[1])]


def _as_int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _pooled(name: str, default: int | None, doc: str) -> Attr:
    return Attr(name, int, default, min=1, doc=doc)


_SCALE_DOC = "multiplies box coordinates to map them onto X"


def _spatial_scale(default: float | None = 1.0, doc: str = _SCALE_DOC) -> Attr:
    return Attr("spatial_scale", float, default, min=0.0, min_exclusive=True, doc=doc)


def _sampling_ratio(default: int, least: int | None = None) -> Attr:
    return Attr("sampling_ratio", int, default, min=least,
                doc="samples per bin side; " + ("0" if least == 0 else "<= 0")
                + ": adaptive ceil(roi size / pooled size)")

ROI_POOLING = OpSpec(
    name="ROIPooling",
    source="OpenVINO ROIPooling-1 (max also MXNet ROIPooling, ONNX MaxRoiPool)",
    doc="Max or bilinear pooling of each box onto a pooled_h x pooled_w grid; "
        "rows of rois carry their batch index.",
    inputs=(Input("X", "T", "[N, C, H, W]", "feature map"),
            Input("rois", "T", "[R, 5]", "rows [batch_id, x1, y1, x2, y2]")),
    attrs=(_pooled("pooled_h", None, "output height"),
           _pooled("pooled_w", None, "output width"),
           _spatial_scale(None, _SCALE_DOC + " (method=max; ignored by bilinear)"),
           Attr("method", str, "max", choices=("max", "bilinear"),
                doc="max: max over integer bins; bilinear: one bilinear sample per bin, "
                    "boxes normalized to [0, 1]")),
    pooled=("pooled_h", "pooled_w"),
    box_cols=5,
)

_COUNTS_DOC = "boxes per image, in order; sums to R"

ROI_POOL = OpSpec(
    name="RoIPool",
    source="Paddle roi_pool",
    doc="Max pooling of each box onto a pooled_height x pooled_width grid "
        "(arithmetic of ROIPooling max); boxes grouped per image by boxes_num.",
    inputs=(Input("X", "T", "[N, C, H, W]", "feature map"),
            Input("boxes", "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input("boxes_num", "I", "[N]", _COUNTS_DOC)),
    attrs=(_pooled("pooled_height", 1, "output height"),
           _pooled("pooled_width", 1, "output width"),
           _spatial_scale()),
    pooled=("pooled_height", "pooled_width"),
)

PSROI_POOL = OpSpec(
    name="PSROIPool",
    source="Paddle psroi_pool (R-FCN)",
    doc="Position-sensitive average pooling: output bin (c, ph, pw) averages input channel "
        "(c*pooled_height + ph)*pooled_width + pw over its region.",
    inputs=(Input("X", "T", "[N, output_channels*PH*PW, H, W]", "position-sensitive score maps"),
            Input("rois", "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input("rois_num", "I", "[N]", _COUNTS_DOC)),
    attrs=(Attr("output_channels", int, None, min=1, doc="channels of the output"),
           _spatial_scale(),
           _pooled("pooled_height", 1, "output height"),
           _pooled("pooled_width", 1, "output width")),
    pooled=("pooled_height", "pooled_width"),
    channels_attr="output_channels",
    output_shape_doc="[R, output_channels, PH, PW]",
)

ROI_ALIGN = OpSpec(
    name="RoIAlign",
    source="Paddle roi_align (detectron2 / torchvision semantics)",
    doc="Average of bilinear samples on a regular grid in each bin; aligned=1 shifts by "
        "half a pixel; sampling_ratio <= 0 picks ceil(bin size) samples per bin.",
    inputs=(Input("X", "T", "[N, C, H, W]", "feature map"),
            Input("boxes", "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input("boxes_num", "I", "[N]", _COUNTS_DOC)),
    attrs=(_pooled("pooled_height", 1, "output height"),
           _pooled("pooled_width", 1, "output width"),
           _spatial_scale(),
           _sampling_ratio(-1),
           Attr("aligned", int, 1, choices=(0, 1),
                doc="1: pixel model with half-pixel offset (detectron2 ROIAlignV2)")),
    pooled=("pooled_height", "pooled_width"),
)

#: Every op of the ort_roi domain, in documentation order.
SPECS: tuple[OpSpec, ...] = (ROI_POOLING, ROI_POOL, PSROI_POOL, ROI_ALIGN)


def spec(name: str, domain: str = DOMAIN) -> OpSpec:
    """The spec that computes node ``domain::name`` (a registered node form)."""
    f = form(domain, name)
    if f is None or not f.registered:
        raise KeyError(f"no op {domain}::{name}")
    return f.spec


def all_specs() -> tuple[OpSpec, ...]:
    """SPECS plus the ops that compute the nodes other exporters write."""
    return SPECS + EXTRA_SPECS


MMCV_ROI_ALIGN = OpSpec(
    name="MMCVRoiAlign",
    source="mmdeploy MMCVRoiAlign (mmcv.ops.roi_align)",
    doc="RoIAlign over rows [batch_id, x1, y1, x2, y2]; mode avg: mean of the samples "
        "(= RoIAlign), max: largest sample (-10000 for a bin without samples, as mmcv).",
    inputs=(Input("input", "T", "[N, C, H, W]", "feature map"),
            Input("rois", "T", "[R, 5]", "rows [batch_id, x1, y1, x2, y2]")),
    attrs=(_pooled("output_height", 1, "output height"),
           _pooled("output_width", 1, "output width"),
           _spatial_scale(),
           _sampling_ratio(0),
           Attr("mode", str, "avg", choices=("avg", "max"), doc="mean or max of the samples"),
           Attr("aligned", int, 1, choices=(0, 1), doc="1: half-pixel offset")),
    pooled=("output_height", "output_width"),
    box_cols=5,
    domain="mmdeploy",
    output="output",
)

MMCV_ROI_ALIGN_ROTATED = OpSpec(
    name="MMCVRoIAlignRotated",
    source="mmcv roi_align_rotated (mmrotate, through mmdeploy)",
    doc="RoIAlign over rotated boxes [batch_id, cx, cy, w, h, theta]: the bin grid is laid "
        "out about the centre and rotated by theta (radians; -theta when clockwise); mean "
        "of the bilinear samples.",
    inputs=(Input("input", "T", "[N, C, H, W]", "feature map"),
            Input("rois", "T", "[R, 6]", "rows [batch_id, cx, cy, w, h, theta]")),
    attrs=(_pooled("output_height", 1, "output height"),
           _pooled("output_width", 1, "output width"),
           _spatial_scale(),
           _sampling_ratio(0),
           Attr("aligned", int, 1, choices=(0, 1), doc="1: half-pixel offset of the centre"),
           Attr("clockwise", int, 0, choices=(0, 1), doc="1: theta turns clockwise")),
    pooled=("output_height", "output_width"),
    box_cols=6,
    domain="mmdeploy",
    output="output",
)

CAFFE2_ROI_ALIGN = OpSpec(
    name="RoIAlign",
    source="Caffe2 RoIAlign (detectron2's Caffe2 export)",
    doc="RoIAlign (detectron2 semantics) over rows [batch_id, x1, y1, x2, y2], or "
        "[x1, y1, x2, y2] when N = 1.",
    inputs=(Input("X", "T", "[N, C, H, W]", "feature map"),
            Input("rois", "T", "[R, 5] or [R, 4]", "rows [batch_id, x1, y1, x2, y2]")),
    attrs=(Attr("order", str, "NCHW", choices=("NCHW",), doc="layout of X (NCHW only)"),
           _spatial_scale(),
           _pooled("pooled_h", 1, "output height"),
           _pooled("pooled_w", 1, "output width"),
           _sampling_ratio(-1),
           Attr("aligned", int, 0, choices=(0, 1), doc="1: half-pixel offset")),
    pooled=("pooled_h", "pooled_w"),
    box_cols=(5, 4),
    domain="org.pytorch._caffe2",
)

ONNX_ROI_ALIGN = OpSpec(
    name="RoiAlign",
    source="ONNX RoiAlign (opsets 10, 16, 22: torchvision, mmdeploy, paddle2onnx)",
    doc="ONNX RoiAlign with its inputs and attributes: avg is RoIAlign (half_pixel = "
        "aligned, output_half_pixel = not aligned, sampling_ratio 0 adaptive); max is the "
        "largest bilinear sample of each bin (mmcv, OpenVINO), onnx_max onnxruntime's max "
        "of weighted corners (convert --roialign-max onnx).",
    inputs=(Input("X", "T", "[N, C, H, W]", "feature map"),
            Input("rois", "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input("batch_indices", "I", "[R]", "image of each box")),
    attrs=(Attr("coordinate_transformation_mode", str, "half_pixel",
                choices=("half_pixel", "output_half_pixel"),
                doc="half_pixel: shift by -0.5 (aligned); output_half_pixel: opset 10's rule"),
           Attr("mode", str, "avg", choices=("avg", "max", "onnx_max"),
                doc="avg: mean of the samples; max: the largest sample; onnx_max: the "
                    "largest weighted corner of any sample (onnxruntime's RoiAlign max)"),
           _pooled("output_height", 1, "output height"),
           _pooled("output_width", 1, "output width"),
           _sampling_ratio(0, least=0),
           _spatial_scale()),
    pooled=("output_height", "output_width"),
)

# --- multi-level (FPN) RoIAlign: one op per number of levels ---------------------------------
#: The bridge declares neither a variable number of inputs nor list attributes: the two
#: multi-level nodes are rewritten into these fixed-arity ops (1 to MAX_LEVELS maps, the
#: strides as scalar attributes) by convert and the front door.
MAX_LEVELS = 6


def _levels(L: int) -> tuple[Input, ...]:
    return tuple(Input(f"feat_{i}", "T", f"[N, C, H_{i}, W_{i}]", f"feature map of level {i}")
                 for i in range(L))


def _extractor(L: int) -> OpSpec:
    return OpSpec(
        name=f"ROIFeatureExtractor_L{L}",
        source="OpenVINO ExperimentalDetectronROIFeatureExtractor-6 (CPU plugin)",
        doc=f"FPN RoIAlign over {L} level(s): each box [x1, y1, x2, y2] of image 0 to the level "
            "clamp(floor(log2(sqrt(area) / 224 + 1e-6) + 2), 0, L-1) (area <= 0: none, "
            "output 0), pooled from it with RoIAlign at scale 1/scale_l (sizes at least 1); "
            "second output: the rois.",
        inputs=(Input("rois", "T", "[R, 4]", "rows [x1, y1, x2, y2] (image 0)"),) + _levels(L),
        attrs=(_pooled("output_size", 7, "output height and width"),
               Attr("sampling_ratio", int, 2, doc="samples per bin side; <= 0: adaptive"),
               Attr("aligned", int, 0, choices=(0, 1), doc="1: half-pixel offset"))
        + tuple(Attr(f"scale_{i}", int, None, min=1, doc=f"stride of level {i} (pyramid_scales)")
                for i in range(L)),
        pooled=("output_size", "output_size"),
        features=tuple(range(1, L + 1)),
        boxes_input=0,
        output="output",
        extra_output=("rois_out", "[R, 4]"),
        same_types=True,
    )


def _multi_level(L: int) -> OpSpec:
    return OpSpec(
        name=f"MultiLevelRoiAlign_L{L}",
        source="mmdeploy MMCVMultiLevelRoiAlign (TensorRT plugin)",
        doc=f"FPN RoIAlign over {L} level(s): each box [batch_id, x1, y1, x2, y2] to the level "
            "clamp(floor(log2(sqrt(area) / finest_scale + 1e-6)), 0, L-1), rescaled about "
            "its centre when roi_scale_factor > 0, pooled from it with MMCVRoiAlign at scale "
            "1/stride_l (pool_mode 0 max, 1 avg).",
        inputs=(Input("rois", "T", "[R, 5]", "rows [batch_id, x1, y1, x2, y2]"),) + _levels(L),
        attrs=(_pooled("output_height", 7, "output height"),
               _pooled("output_width", 7, "output width"),
               _sampling_ratio(0),
               Attr("pool_mode", int, 1, choices=(0, 1), doc="0: max, 1: avg"),
               Attr("aligned", int, 1, choices=(0, 1), doc="1: half-pixel offset"),
               Attr("roi_scale_factor", float, -1.0,
                    doc="> 0: boxes rescaled about their centre first"),
               Attr("finest_scale", int, 56, min=1, doc="box size of level 0"))
        + tuple(Attr(f"stride_{i}", float, None, min=0.0, min_exclusive=True,
                     doc=f"stride of level {i} (featmap_strides)") for i in range(L)),
        pooled=("output_height", "output_width"),
        features=tuple(range(1, L + 1)),
        boxes_input=0,
        box_cols=5,
        output="output",
        same_types=True,
    )


EXTRACTOR_SPECS = {L: _extractor(L) for L in range(1, MAX_LEVELS + 1)}
MULTI_LEVEL_SPECS = {L: _multi_level(L) for L in range(1, MAX_LEVELS + 1)}


# --- torchvision: its position-sensitive ops and the RoI stage of its detection models --------

_TORCHVISION_ROIS = Input("rois", "T", "[R, 5]", "rows [batch_id, x1, y1, x2, y2]")

TV_PS_ROI_ALIGN = OpSpec(
    name="TorchvisionPSRoIAlign",
    source="torchvision ps_roi_align (R-FCN)",
    doc="Position-sensitive RoIAlign: output bin (c, ph, pw) is the mean of the bilinear "
        "samples of input channel (c*PH + ph)*PW + pw over the bin; the box's corners scaled "
        "and shifted by -0.5, any size; sampling_ratio <= 0: ceil(bin size) samples per side; "
        "a bin whose sample count is 0 gives NaN (0/0), as torchvision's kernel.",
    inputs=(Input("X", "T", "[N, C_out*PH*PW, H, W]", "position-sensitive score maps"),
            _TORCHVISION_ROIS),
    attrs=(_pooled("pooled_height", 1, "output height"),
           _pooled("pooled_width", 1, "output width"),
           _spatial_scale(),
           _sampling_ratio(-1)),
    pooled=("pooled_height", "pooled_width"),
    channels_per_bin=True,
    box_cols=5,
    output_shape_doc="[R, C/(PH*PW), PH, PW]",
)

TV_PS_ROI_POOL = OpSpec(
    name="TorchvisionPSRoIPool",
    source="torchvision ps_roi_pool (R-FCN)",
    doc="Position-sensitive average pooling over integer bins: corners round(x * scale), the "
        "box at least 1 x 1, bin p over [floor(p*bin), ceil((p+1)*bin)) from the start, "
        "clipped to [0, H-1] / [0, W-1] as torchvision's kernel does; output bin (c, ph, pw) "
        "the mean of input channel (c*PH + ph)*PW + pw over it, 0 if empty. (Paddle's "
        "psroi_pool, PSROIPool, places its bins otherwise.)",
    inputs=(Input("X", "T", "[N, C_out*PH*PW, H, W]", "position-sensitive score maps"),
            _TORCHVISION_ROIS),
    attrs=(_pooled("pooled_height", 1, "output height"),
           _pooled("pooled_width", 1, "output width"),
           _spatial_scale()),
    pooled=("pooled_height", "pooled_width"),
    channels_per_bin=True,
    box_cols=5,
    output_shape_doc="[R, C/(PH*PW), PH, PW]",
)


def _pyramid(L: int) -> OpSpec:
    return OpSpec(
        name=f"PyramidRoIAlign_L{L}",
        source="torchvision MultiScaleRoIAlign, one fused stage (ort-roi convert, "
               "ort_roi.torch_export)",
        doc=f"RoIAlign of each box [batch_id, x1, y1, x2, y2] from the one of the {L} feature "
            "maps its level names (levels[r], as the graph computes it; a level outside 0 .. "
            "L-1 gives 0), at that map's spatial_scale; the output in the order of the rois. "
            "aligned 0 is torchvision's MultiScaleRoIAlign.",
        inputs=(_TORCHVISION_ROIS, Input("levels", "I", "[R]", "the feature map of each box"))
        + _levels(L),
        attrs=(_pooled("output_height", 1, "output height"),
               _pooled("output_width", 1, "output width"),
               _sampling_ratio(0),
               Attr("aligned", int, 0, choices=(0, 1), doc="1: half-pixel offset"))
        + tuple(Attr(f"spatial_scale_{i}", float, None, min=0.0, min_exclusive=True,
                     doc=f"multiplies box coordinates onto feat_{i}") for i in range(L)),
        pooled=("output_height", "output_width"),
        features=tuple(range(2, L + 2)),
        boxes_input=0,
        box_cols=5,
        output="output",
        same_types=True,
    )


PYRAMID_SPECS = {L: _pyramid(L) for L in range(1, MAX_LEVELS + 1)}

#: The largest roi map HeatmapsToKeypoints upsamples one box's heatmaps to (ceil(w) * ceil(h)
#: pixels; 8192 x 8192): time grows with it, and onnxruntime's Resize would allocate K of them.
MAX_KEYPOINT_MAP = 1 << 26

HEATMAPS_TO_KEYPOINTS = OpSpec(
    name="HeatmapsToKeypoints",
    source="torchvision heatmaps_to_keypoints (Keypoint R-CNN's decoding, one fused op: "
           "ort-roi convert, ort_roi.torch_export)",
    doc="Keypoints from per-box heatmaps, as torchvision's exported graph computes them: box r "
        "[x1, y1, x2, y2] has w = max(x2 - x1, 1), h = max(y2 - y1, 1); its K heatmaps are "
        "resized to ceil(h) x ceil(w) with onnxruntime's Resize (cubic, cubic_coeff_a -0.75, "
        "half_pixel; bit for bit); keypoint k is the first maximum of map k at (x_int, y_int): "
        "x = (x_int + 0.5) * (w / ceil(w)) + x1, y likewise, and its score is that maximum. "
        "keypoints[r, k] = (x, y, 1).",
    inputs=(Input("maps", "T", "[R, K, H, W]", "heatmaps, one set per box"),
            Input("rois", "T", "[R, 4]", "the boxes [x1, y1, x2, y2] in image coordinates")),
    attrs=(),
    pooled=("", ""),
    features=(0,),
    output="keypoints",
    output_shape_doc="[R, K, 3] (x, y, 1)",
    extra_output=("scores", "[R, K]"),
    same_types=True,
    kind="keypoints",
)

#: The largest image PasteMasks pastes into (height * width; 8192 x 8192), and the most
#: pixels of all its masks together (2 GiB of float32): the image size is an input.
MAX_MASK_IMAGE = 1 << 26
MAX_MASK_OUTPUT = 1 << 29
#: Box coordinates PasteMasks accepts: [-2^31, 2^31) (image pixels).
MAX_MASK_COORD = 1 << 31

PASTE_MASKS = OpSpec(
    name="PasteMasks",
    source="torchvision paste_masks_in_image (Mask R-CNN's mask pasting, one fused op: "
           "ort-roi convert, ort_roi.torch_export)",
    doc="Each box's mask pasted into an image of zeros, as torchvision's exported graph "
        "computes it: box r [x1, y1, x2, y2] (integer, inclusive) has w = max(x2 - x1 + 1, 1), "
        "h = max(y2 - y1 + 1, 1); channel 0 of its mask is resized to h x w with onnxruntime's "
        "Resize (linear, half_pixel; bit for bit) and its part inside the image, rows "
        "max(y1, 0) .. min(y2 + 1, height) and columns max(x1, 0) .. min(x2 + 1, width), is "
        "written there; nothing where that part is empty.",
    inputs=(Input("masks", "T", "[R, C, M_h, M_w]", "one mask per box (channel 0 is pasted)"),
            Input("boxes", "I", "[R, 4]", "integer boxes [x1, y1, x2, y2] in image pixels"),
            Input("image_size", "I", "[2]", "(height, width) of the image")),
    attrs=(),
    pooled=("", ""),
    output="image_masks",
    output_shape_doc="[R, height, width]",
    same_types=True,
    kind="image",
)

#: The ops that compute the nodes other exporters write (see FORMS).
EXTRA_SPECS: tuple[OpSpec, ...] = (MMCV_ROI_ALIGN, MMCV_ROI_ALIGN_ROTATED, CAFFE2_ROI_ALIGN,
                                   ONNX_ROI_ALIGN, TV_PS_ROI_ALIGN, TV_PS_ROI_POOL,
                                   *EXTRACTOR_SPECS.values(), *MULTI_LEVEL_SPECS.values(),
                                   *PYRAMID_SPECS.values(), HEATMAPS_TO_KEYPOINTS,
                                   PASTE_MASKS)


# --- node forms ------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeForm:
    """A node as a graph holds it (ours, or another exporter's), and how ort_roi runs it.

    ``registered``: the bridge registers ``spec``'s kernel under domain::op_type, so a plain
    session runs the node as it is. Otherwise onnxruntime has the node natively and
    ``convert`` (and the front door) rewrite it into ``spec`` (in domain ort_roi; with
    ``levels``, the spec of its number of feature maps): exporter attributes absent from the
    node take the exporter's ``defaults``, ``drop`` ones are dropped, list attributes are
    ``split`` into scalars (a "name_{}" pattern: one per level),
    ``fixed`` values set, and an attribute the node's opset lacks takes ``before_opset``'s
    value.
    ``--to onnx`` rewrites ``spec`` nodes back (only those whose ``fixed`` values match).
    """

    domain: str
    op_type: str
    spec: OpSpec
    writers: str
    oracle: str
    registered: bool = True
    levels: Mapping[int, OpSpec] | None = None  # one spec per number of feature maps
    drop: tuple[str, ...] = ()  # exporter attributes without effect (dropped by convert)
    guard_levels: int = 0  # >0: a plain session refuses the node as exported, naming the fix
    defaults: Mapping[str, Any] = field(default_factory=dict)
    split: Mapping[str, tuple[str, ...] | str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    before_opset: tuple[int, Mapping[str, Any]] | None = None
    two_maxes: bool = False  # its mode "max" has two readings (graph.ROIALIGN_MAX)

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)

    def target(self, n_inputs: int) -> OpSpec | None:
        """The spec a node with ``n_inputs`` inputs is computed by (None: no such arity)."""
        if self.levels is None:
            return self.spec
        return self.levels.get(n_inputs - 1)

    def computed_by(self, spec: OpSpec) -> bool:
        """True when nodes of this form become nodes of ``spec`` (at some arity)."""
        return spec is self.spec or (self.levels is not None and spec in self.levels.values())

    def parts(self, name: str, levels: int) -> tuple[str, ...]:
        """The scalar attributes that list attribute ``name`` is split into."""
        parts = self.split[name]
        if isinstance(parts, str):  # a "name_{}" pattern: one per level
            return tuple(parts.format(i) for i in range(levels))
        return parts


_OURS = "ort_roi graphs (ort_roi.builders)"
_TRANSCRIBED = "a literal loop of mmcv's CPU kernel (tests/literal.py)"

#: Every node form ort_roi runs: registration, convert, the front door, validate, schemas
#: and `ort-roi info` read this table.
FORMS: tuple[NodeForm, ...] = (
    NodeForm(DOMAIN, "ROIPooling", ROI_POOLING, _OURS,
             "MXNet ROIPooling (max), OpenVINO ROIPooling-1 (bilinear)"),
    NodeForm(DOMAIN, "RoIPool", ROI_POOL, _OURS, "Paddle roi_pool"),
    NodeForm(DOMAIN, "PSROIPool", PSROI_POOL, _OURS, "Paddle psroi_pool"),
    NodeForm(DOMAIN, "RoIAlign", ROI_ALIGN, _OURS, "Paddle roi_align"),
    NodeForm(DOMAIN, "RoiAlign", ONNX_ROI_ALIGN, "ort-roi convert (from ONNX RoiAlign)",
             "avg: onnxruntime's RoiAlign; max: " + _TRANSCRIBED),
    *(NodeForm(DOMAIN, s.name, s, "ort-roi convert (from OpenVINO's ROI feature extractor)",
               "OpenVINO") for s in EXTRACTOR_SPECS.values()),
    NodeForm(DOMAIN, TV_PS_ROI_ALIGN.name, TV_PS_ROI_ALIGN,
             "ort_roi.torch_export (torchvision.ops.ps_roi_align)", "torchvision ps_roi_align"),
    NodeForm(DOMAIN, TV_PS_ROI_POOL.name, TV_PS_ROI_POOL,
             "ort_roi.torch_export (torchvision.ops.ps_roi_pool)", "torchvision ps_roi_pool"),
    *(NodeForm(DOMAIN, s.name, s, "ort-roi convert (torchvision's exported MultiScaleRoIAlign "
               "stage), ort_roi.torch_export", "torchvision MultiScaleRoIAlign")
      for s in PYRAMID_SPECS.values()),
    NodeForm(DOMAIN, HEATMAPS_TO_KEYPOINTS.name, HEATMAPS_TO_KEYPOINTS,
             "ort-roi convert (torchvision's exported keypoint decoding Loop), "
             "ort_roi.torch_export", "onnxruntime's Resize + ArgMax (torchvision's exported "
             "Loop, bit for bit); eager torchvision heatmaps_to_keypoints"),
    NodeForm(DOMAIN, PASTE_MASKS.name, PASTE_MASKS,
             "ort-roi convert (torchvision's exported mask pasting Loop), ort_roi.torch_export",
             "onnxruntime's Resize + the Loop's slices (torchvision's exported Loop, bit for "
             "bit); eager torchvision paste_masks_in_image"),
    *(NodeForm(DOMAIN, s.name, s, "ort-roi convert (from mmdeploy::MMCVMultiLevelRoiAlign)",
               "level rule + MMCVRoiAlign per level") for s in MULTI_LEVEL_SPECS.values()),
    NodeForm("mmdeploy", "MMCVRoiAlign", MMCV_ROI_ALIGN,
             "mmdeploy (TensorRT >= 1.0, PPLNN, onnxruntime 0.1-0.3)",
             "avg: Paddle roi_align; max: " + _TRANSCRIBED),
    NodeForm("mmcv", "MMCVRoiAlign", MMCV_ROI_ALIGN, "mmcv 1.x",
             "avg: Paddle roi_align; max: " + _TRANSCRIBED),
    NodeForm("mmdeploy", "MMCVRoIAlignRotated", MMCV_ROI_ALIGN_ROTATED,
             "mmrotate through mmdeploy",
             "OpenVINO (reads it from ONNX, aligned=1); " + _TRANSCRIBED),
    NodeForm("mmcv", "MMCVRoIAlignRotated", MMCV_ROI_ALIGN_ROTATED, "mmrotate / mmcv",
             "OpenVINO (aligned=1); " + _TRANSCRIBED),
    NodeForm("org.pytorch._caffe2", "RoIAlign", CAFFE2_ROI_ALIGN,
             "detectron2's Caffe2 export", "Paddle roi_align"),
    NodeForm("", "RoiAlign", ONNX_ROI_ALIGN, "torchvision, mmdeploy (onnxruntime >= 0.4), "
             "paddle2onnx", "avg: onnxruntime's RoiAlign; max: " + _TRANSCRIBED,
             registered=False, two_maxes=True,
             before_opset=(16, {"coordinate_transformation_mode": "output_half_pixel"})),
    NodeForm("org.openvinotoolkit", "ExperimentalDetectronROIFeatureExtractor",
             EXTRACTOR_SPECS[4], "mmdeploy's OpenVINO backend, OpenVINO Training Extensions",
             "OpenVINO (reads it from ONNX)", registered=False, levels=EXTRACTOR_SPECS,
             split={"pyramid_scales": "scale_{}"}, guard_levels=4,
             drop=("image_id", "distribute_rois_between_levels", "preserve_rois_order")),
    NodeForm("mmdeploy", "MMCVMultiLevelRoiAlign", MULTI_LEVEL_SPECS[4],
             "mmdeploy's TensorRT backend", "its level rule composed with MMCVRoiAlign per "
             "level (Paddle roi_align), and a literal loop", registered=False,
             levels=MULTI_LEVEL_SPECS, split={"featmap_strides": "stride_{}"}, guard_levels=4),
    NodeForm("", "MaxRoiPool", ROI_POOLING, "ONNX graphs (MaxRoiPool-1)",
             "onnxruntime's MaxRoiPool, MXNet ROIPooling", registered=False,
             defaults={"spatial_scale": 1.0}, split={"pooled_shape": ("pooled_h", "pooled_w")},
             fixed={"method": "max"}),
)


def form(domain: str, op_type: str) -> NodeForm | None:
    """The form of a node (domain "ai.onnx" is the default domain), or None."""
    return _FORMS.get(("" if domain == "ai.onnx" else domain, op_type))


_FORMS = {f.key: f for f in FORMS}
