"""NumPy steps of Paddle's generate_proposals (v2) and distribute_fpn_proposals, equal to their
CPU kernels bit for bit (ort_roi/definitions/proposals.py is the literal transcription), by
concern:

- ``order.py``: the anchors taken before NMS, in libstdc++'s std::nth_element / std::sort
  order (ties replayed).
- NMS, one module per strategy, each with its thresholds and the tests that pin them:
  ``sparse.py`` (the suppressing pairs among boxes overlapping along one axis),
  ``grid.py`` (the pairs from a grid of size classes and rows: every anchor of an image),
  ``blocks.py`` (blocks of boxes, each block's keeps suppressing every later box),
  ``fixed.py`` (which of them runs at a fixed threshold), ``adaptive.py`` (eta < 1: the
  threshold falls after each keep), ``common.py`` (the IoU of a pair, the keeps settled from
  pairs, the comparison budget).
- ``generate.py``: decoding, clipping, the size filter and ``nms`` (the compute step
  generate_proposals); ``distribute.py``: distribute_fpn_proposals.
"""

from .distribute import distribute_fpn_proposals
from .generate import BBOX_CLIP, decode, generate_proposals, nms, proposals_one_image
from .order import candidates, order_nth_element, order_sort
from ....levels import fpn_levels

__all__ = ["BBOX_CLIP", "candidates", "decode", "distribute_fpn_proposals", "fpn_levels",
           "generate_proposals", "nms", "order_nth_element", "order_sort",
           "proposals_one_image"]
