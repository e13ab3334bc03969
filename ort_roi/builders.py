"""``ort_roi.builders``: nodes with every attribute explicit and models onnxruntime reads.

The public name of ``ort_roi.graph.builders`` (``import ort_roi.builders`` and
``from ort_roi import builders`` both give these functions)::

    from ort_roi import builders
    model = builders.single_op_model("RoIAlign", pooled_height=7, pooled_width=7,
                                     spatial_scale=0.25, sampling_ratio=2)
"""

from .graph.builders import *  # noqa: F401,F403
from .graph.builders import __all__  # noqa: F401
