"""The vocabulary every op entry (``ort_roi.ops``) is written in: an op's attributes, inputs
and outputs (``OpSpec``), the node forms a graph holds it in (``NodeForm``), and the entry
that ties a spec to its kernel, its definition and its compute steps (``Op``).

Registration (``ort_roi.runtime.bridge``), default filling and attribute validation (here),
the graph rewrite, ONNX schemas (``ort_roi.graph.schemas``), the CLI's ``info``, ``validate``
and the op table of docs/ops.md all read the entries; nothing here names a particular op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import RoiOpError

DOMAIN = "ort_roi"
OPSET_VERSION = 1

#: Type constraints: name -> allowed NumPy dtypes.
TYPES: dict[str, tuple[np.dtype, ...]] = {
    "T": (np.dtype(np.float32), np.dtype(np.float64)),
    "I": (np.dtype(np.int32), np.dtype(np.int64)),
}

#: The most feature maps a multi-level op takes (one fixed-arity op per number of levels:
#: the bridge declares no variable number of inputs).
MAX_LEVELS = 6

#: The largest output side an attribute may ask for (pooled / output / crop sizes, output
#: channels): detectors pool 7 to 56, TF OD API crops 7 to 33; a side past this is a broken
#: graph.
MAX_OUTPUT_SIDE = 1 << 16
#: The most elements one output may have: 8 GiB of float32, indices within int32 on the GPU.
#: The attributes' own product (one box, one channel) is checked when they are resolved, R and
#: C with them by the kernel (``check_output_size``; CropAndResize's NHWC output by its own),
#: both before anything is allocated.
MAX_OUTPUT_ELEMENTS = (1 << 31) - 1
#: The largest fixed sampling_ratio: samples per bin side (a ratio past this multiplies a
#: rotated box's work and index arrays beyond any use; adaptive grids follow the boxes).
MAX_SAMPLING_RATIO = 1 << 20


@dataclass(frozen=True)
class Attr:
    """One attribute: its Python type, default (``None`` = required) and valid range."""

    name: str
    type: type  # int, float or str
    default: Any = None
    min: float | None = None  # lower bound
    min_exclusive: bool = False  # True: value > min, False: value >= min
    max: float | None = None  # upper bound (value <= max)
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
            elif not isinstance(value, str):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be {self.type.__name__}, got {value!r}") from None
        if self.type is float and not np.isfinite(value):
            raise RoiOpError(op, f"attribute '{self.name}'", f"must be finite, got {value!r}")
        if self.choices and value not in self.choices:
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be one of {list(self.choices)}, got {value!r}")
        if self.min is not None and (value <= self.min if self.min_exclusive else value < self.min):
            rel = ">" if self.min_exclusive else ">="
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be {rel} {self.min:g}, got {value!r}")
        if self.max is not None and value > self.max:
            raise RoiOpError(op, f"attribute '{self.name}'",
                             f"must be <= {self.max!r}, got {value!r}")
        return value


@dataclass(frozen=True)
class Input:
    """One input: its name, type constraint (a key of TYPES), shape (for docs) and meaning."""

    name: str
    type: str  # a key of TYPES
    shape: str  # for docs, e.g. "[N, C, H, W]"
    doc: str = ""


@dataclass(frozen=True)
class Output:
    """One output: its name, its type ("T": the type of the op's feature input; or a NumPy
    dtype name such as "int32"), its shape (for docs) and meaning."""

    name: str
    shape: str
    type: str = "T"
    doc: str = ""

    def dtype(self, t: np.dtype) -> np.dtype:
        """This output's dtype when the op computes in ``t``."""
        return np.dtype(t) if self.type == "T" else np.dtype(self.type)


#: An input's shape as far as it is known: a list of dimensions (int, a symbolic name, or
#: None), or None when not even the rank is.
Dims = Sequence[Any] | None


def pooled_shapes(spec: "OpSpec", dims: Sequence[Dims], attrs: Mapping[str, Any],
                  values: Mapping[int, np.ndarray]) -> list[list]:
    """The output shapes of a pooling op: [R, C_out, PH, PW] (C_out: X's channels, or
    ``channels_attr``, or C / (PH * PW) for position-sensitive ops) and, with a second
    output, the rois as they came in. Raises RoiOpError where known dimensions contradict
    the op (X not of rank 4, boxes not [R, box_cols], X's channels)."""
    x, b = dims[spec.features[0]], dims[spec.boxes_input]
    if x is not None and len(x) != 4:
        raise RoiOpError(spec.name, f"input '{spec.feature.name}'",
                         f"must have rank 4 [N, C, H, W], got rank {len(x)}")
    cols = spec.box_cols if isinstance(spec.box_cols, tuple) else (spec.box_cols,)
    if b is not None and (len(b) != 2 or (isinstance(b[1], int) and b[1] not in cols)):
        raise RoiOpError(spec.name, f"input '{spec.boxes.name}'",
                         f"must have shape [R, {' or '.join(map(str, cols))}], "
                         f"got {[d if d is not None else '?' for d in b]}")
    r = b[0] if b is not None else None
    c = x[1] if x is not None else None
    ph, pw = attrs.get(spec.pooled[0]), attrs.get(spec.pooled[1])
    if spec.channels_attr:
        if isinstance(c, int):
            check_channels(spec.name, c, attrs[spec.channels_attr], ph, pw)
        c = attrs.get(spec.channels_attr)
    elif spec.channels_per_bin:
        if isinstance(c, int):
            check_channels_per_bin(spec.name, c, ph, pw)
        c = c // (ph * pw) if isinstance(c, int) else None
    out = [[r, c, ph, pw]]
    if len(spec.outputs) == 2:  # the rois, as they came in
        out.append(list(b) if b is not None else [None, None])
    return out


def check_channels(op: str, C: int, oc: int, ph: int, pw: int) -> None:
    """Position-sensitive pooling: X must carry one channel per (output channel, bin)."""
    if C != oc * ph * pw:
        raise RoiOpError(op, "input 'X'",
                         f"must have output_channels*pooled_height*pooled_width = "
                         f"{oc}*{ph}*{pw} = {oc * ph * pw} channels, got {C}")


def check_channels_per_bin(op: str, C: int, ph: int, pw: int) -> None:
    """torchvision's position-sensitive ops: X's channels a multiple of PH * PW."""
    if C % (ph * pw):
        raise RoiOpError(op, "input 'X'",
                         f"must have a multiple of pooled_height*pooled_width = {ph}*{pw} = "
                         f"{ph * pw} channels, got {C}")


@dataclass(frozen=True)
class OpSpec:
    """One op: its inputs, attributes and outputs, and the rule giving its output shapes."""

    name: str
    source: str
    doc: str
    inputs: tuple[Input, ...]
    attrs: tuple[Attr, ...]
    outputs: tuple[Output, ...]
    #: the output shapes from what is known of the input shapes and values:
    #: ``shapes(spec, dims, attrs, values)`` (see ``pooled_shapes``, the default)
    shapes: Callable[..., list[list]] = pooled_shapes
    pooled: tuple[str, str] | None = None  # the attributes giving the output's spatial size
    channels_attr: str | None = None  # attribute giving the output channels (else C of X)
    channels_per_bin: bool = False  # position-sensitive: output channels = C / (PH * PW)
    box_cols: int | tuple[int, ...] = 4  # columns of the boxes input (or the accepted ones)
    domain: str = DOMAIN
    features: tuple[int, ...] = (0,)  # inputs that are feature maps (go to the GPU)
    boxes_input: int = 1  # the input holding the boxes
    same_types: bool = False  # every T input of one type (one overload per dtype)
    per_box: bool = False  # the feature input holds one item per box (keypoint maps, masks)
    #: output row i is computed from box i's input rows alone, so ``validate`` may compare some
    #: rows; False (proposal stages: outputs select and reorder the boxes) compares it whole
    rowwise: bool = True
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
        self._check_output_size(out)
        return out

    def output_size_attrs(self) -> tuple[str, ...]:
        """The attributes that size each box's output.

        Returns:
            The pooled sizes (``pooled``) and ``channels_attr``, each named once.
        """
        names = (self.pooled or ()) + ((self.channels_attr,) if self.channels_attr else ())
        return tuple(dict.fromkeys(names))

    def _check_output_size(self, values: Mapping[str, Any]) -> None:
        """Each output-size attribute <= MAX_OUTPUT_SIDE, and (the same attribute counted as
        often as ``pooled`` names it) their product <= MAX_OUTPUT_ELEMENTS: RoiOpError naming
        them and their values before a kernel allocates anything."""
        names = self.output_size_attrs()
        for name in names:
            if values[name] > MAX_OUTPUT_SIDE:
                raise RoiOpError(self.name, f"attribute '{name}'",
                                 f"must be <= {MAX_OUTPUT_SIDE}, got {values[name]!r}")
        sizes = list(self.pooled or ()) + ([self.channels_attr] if self.channels_attr else [])
        n = int(np.prod([values[k] for k in sizes], dtype=object)) if sizes else 1
        if n > MAX_OUTPUT_ELEMENTS:
            raise RoiOpError(self.name, f"attribute '{names[0]}'",
                             f"{' * '.join(sizes)} = "
                             f"{' * '.join(str(values[k]) for k in sizes)} = {n} output "
                             f"elements a box, more than {MAX_OUTPUT_ELEMENTS}")

    @property
    def key(self) -> tuple[str, str]:
        """(domain, name): what the entries are looked up by."""
        return (self.domain, self.name)

    @property
    def boxes(self) -> Input:
        return self.inputs[self.boxes_input]

    @property
    def feature(self) -> Input:
        return self.inputs[self.features[0]]

    def output_shapes(self, dims: Sequence[Dims], attrs: Mapping[str, Any],
                      values: Mapping[int, np.ndarray] | None = None) -> list[list]:
        """The shape of each output (entries None where unknown) from the inputs' shapes
        ``dims`` (one per input; None: unknown), the attributes and the values of the
        inputs that are known (``values``: input index -> array). Raises RoiOpError where
        known shapes contradict the op."""
        dims = list(dims) + [None] * (len(self.inputs) - len(dims))
        return self.shapes(self, dims, attrs, values or {})


def pooled_attr(name: str, default: int | None, doc: str) -> Attr:
    """An output size attribute (>= 1)."""
    return Attr(name, int, default, min=1, doc=doc)


def pooled_attrs(height: str = "pooled_height", width: str = "pooled_width",
                 default: int | None = 1) -> tuple[Attr, Attr]:
    """The output grid's two size attributes (>= 1), its height and its width (the names an
    OpSpec's ``pooled`` gives)."""
    return pooled_attr(height, default, "output height"), pooled_attr(width, default,
                                                                      "output width")


def aligned_attr(default: int, doc: str = "1: half-pixel offset") -> Attr:
    """The aligned attribute (0 or 1)."""
    return Attr("aligned", int, default, choices=(0, 1), doc=doc)


SCALE_DOC = "multiplies box coordinates to map them onto X"


def spatial_scale_attr(default: float | None = 1.0, doc: str = SCALE_DOC) -> Attr:
    """The spatial_scale attribute (> 0)."""
    return Attr("spatial_scale", float, default, min=0.0, min_exclusive=True, doc=doc)


def sampling_ratio_attr(default: int, least: int | None = None) -> Attr:
    """The sampling_ratio attribute (<= 0 or 0: adaptive)."""
    return Attr("sampling_ratio", int, default, min=least, max=MAX_SAMPLING_RATIO,
                doc="samples per bin side; " + ("0" if least == 0 else "<= 0")
                + ": adaptive ceil(roi size / pooled size)")


def level_inputs(L: int) -> tuple[Input, ...]:
    """The feature maps of L levels, feat_0 (the finest) first."""
    return tuple(Input(f"feat_{i}", "T", f"[N, C, H_{i}, W_{i}]", f"feature map of level {i}")
                 for i in range(L))


def level_scale_attrs(L: int, name: str, doc: str) -> tuple[Attr, ...]:
    """One required float attribute (> 0) per level: ``name`` and ``doc`` formatted with the
    level (e.g. "stride_{}")."""
    return tuple(Attr(name.format(i), float, None, min=0.0, min_exclusive=True,
                      doc=doc.format(i)) for i in range(L))


def pyramid_layout(first: int, L: int) -> dict[str, Any]:
    """A multi-level op's inputs: the boxes first, its L feature maps (of one dtype, as every
    T input) from input ``first`` on; OpSpec's ``features``, ``boxes_input``, ``same_types``."""
    return dict(features=tuple(range(first, first + L)), boxes_input=0, same_types=True)


#: the feature map of a single-map op
FEATURE_MAP = Input("X", "T", "[N, C, H, W]", "feature map")
#: rows [batch_id, x1, y1, x2, y2] (torchvision's and mmcv's rois)
BATCH_ROIS = Input("rois", "T", "[R, 5]", "rows [batch_id, x1, y1, x2, y2]")
ROTATED_ROIS = Input("rois", "T", "[R, 6]", "rows [batch_id, cx, cy, w, h, theta]")
#: the rotated ops' clockwise attribute (theta in radians, counter-clockwise unless 1)
CLOCKWISE = Attr("clockwise", int, 0, choices=(0, 1), doc="1: theta turns clockwise")
#: per-image box counts (Paddle's boxes_num / rois_num)
COUNTS_DOC = "boxes per image, in order; sums to R"


def counted_boxes(boxes: str = "boxes", counts: str = "boxes_num") -> tuple[Input, Input]:
    """Paddle's boxes: [R, 4] rows [x1, y1, x2, y2], image by image, and their count per
    image [N]."""
    return (Input(boxes, "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input(counts, "I", "[N]", COUNTS_DOC))


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


def level_forms(specs: Mapping[int, OpSpec], writers: str, oracle: str) -> tuple[NodeForm, ...]:
    """A multi-level op's registered forms: one node per number of feature maps, each named as
    its spec (e.g. DistributeRoIAlign_L4, in domain ort_roi)."""
    return tuple(NodeForm(DOMAIN, s.name, s, writers, oracle) for s in specs.values())


@dataclass(frozen=True)
class Op:
    """One op entry: everything ort_roi knows about an op, found from here.

    ``specs``: its spec (one per number of feature maps for the multi-level ops);
    ``kernel``: the fast kernel the registered nodes run, called with the node's inputs and
    attributes as keyword arguments (NumPy in, NumPy out; CuPy feature maps compute on the
    GPU); ``definition``: the readable definition (``ort_roi.definitions``) it is held to,
    called with resolved attributes (``ort_roi.ops.define``); ``steps``: the compute steps
    (``ort_roi.kernels.dispatch.steps``) the kernel runs; ``forms``: every node form a graph
    holds it in (its own, and the nodes other exporters write that it computes); ``node``:
    where a node's inputs or attributes are not the kernel's parameters (the multi-level ops'
    per-level scales, attributes spatial_scale_0 ..), the function a node calls, which calls
    ``kernel``; ``own``: one of the product's own ops, those of the ort_roi domain its own
    graphs are built from (``ort_roi.SPECS``), rather than another framework's op it computes;
    ``small``: what the bridge tries first (``kernels/small.py``), called as ``kernel`` with
    resolved attributes: the kernel's output for a small call, bit for bit, or None.
    """

    specs: tuple[OpSpec, ...]
    kernel: Callable[..., Any]
    definition: Callable[..., Any]
    steps: tuple[Any, ...]  # kernels.dispatch.Step (spec.py imports no kernels)
    forms: tuple[NodeForm, ...]
    node: Callable[..., Any] | None = None
    own: bool = False
    small: Callable[..., Any] | None = None

    @property
    def spec(self) -> OpSpec:
        """The spec (the first, for the multi-level ops)."""
        return self.specs[0]
