"""What the installed onnx and onnxruntime can do, for the tests that need more than the
dependency floor (.ci/floor-constraints.txt): each skips there with the version it needs."""

from __future__ import annotations

import re

import onnxruntime as ort
import pytest

from ort_roi.graph import schemas


def version(text: str) -> tuple[int, ...]:
    """A version string as a tuple of its first three numbers: '1.17.0' -> (1, 17, 0).

    Args:
        text: a version as a package reports it.

    Returns:
        The numbers, for comparison with a tuple.
    """
    return tuple(int(n) for n in re.findall(r"\d+", text)[:3])


ORT = version(ort.__version__)

#: Paddle's proposal ops are reproduced bit for bit with NumPy 2's scalar arithmetic (NEP 50);
#: under NumPy 1.24 a roi's level / a tie can come out otherwise (seen on the floor)
needs_numpy_2 = pytest.mark.skipif(
    version(__import__("numpy").__version__) < (2,),
    reason="GenerateProposals / DistributeFpnProposals are bit for bit with Paddle on numpy >= 2 "
           "(NEP 50 scalar arithmetic); numpy 1.24 differs on some rois")

#: ort_roi's nodes get inferred shapes only where onnx runs Python inference functions
needs_shape_inference = pytest.mark.skipif(
    not schemas.SHAPE_INFERENCE,
    reason="ort_roi's shape inference needs onnx >= 1.19 "
           "(OpSchema.set_type_and_shape_inference_function)")

#: onnxruntime loads a model stamped with ai.onnx opset 22 from 1.21 on
needs_opset_22 = pytest.mark.skipif(ORT < (1, 21),
                                    reason="onnxruntime < 1.21 refuses models at opset 22")

#: The mutants of tests/test_recognisers_mutated.py feed native RoiAligns batch indices past
#: the batch; onnxruntime 1.32 (as tested) refuses them, 1.17 reads out of bounds (seen: a
#: row pooled from other memory, and a segmentation fault): a mutant's native run is then no
#: oracle
needs_bounded_roi_align = pytest.mark.skipif(
    ORT < (1, 32), reason="onnxruntime < 1.32 may read RoiAlign's batch indices out of "
                          "bounds: no oracle for the mutants (tested at 1.32)")
