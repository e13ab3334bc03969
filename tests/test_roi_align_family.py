"""The RoIAlign family through its test template (tests/roi_op_tester.py): each op is a
subclass naming its module and its cases; the template checks the kernel against the
definition, the bridge exactly (every registered node form, the dtype matrix), boxes of the
other float type, non-contiguous inputs, the goldens and the bad-input catalogue."""

from tests import cases as C
from tests import test_bad_inputs, test_goldens
from tests.roi_op_tester import RoIOpTester, pytest_generate_tests  # noqa: F401 - the hook


class TestRoIAlign(RoIOpTester):
    MODULE = "roi_align"
    CASES = C.roi_align_cases(21)[::8]
    CATALOGUE_KEY = "RoIAlign"
    GOLDEN_SUITE = "roi_align"


class TestONNXRoiAlign(RoIOpTester):
    MODULE = "onnx_roi_align"
    CASES = (C.onnx_roi_align_cases(22)[::8] + C.onnx_roi_align_cases(23, "max")[1::16]
             + C.onnx_roi_align_cases(24, "onnx_max")[2::16])
    CATALOGUE_KEY = "RoiAlign"


class TestMMCVRoiAlign(RoIOpTester):
    MODULE = "mmcv_roi_align"
    CASES = C.mmcv_cases(25)[::8] + C.mmcv_cases(26, "max")[3::16]


class TestCaffe2RoIAlign(RoIOpTester):
    MODULE = "caffe2_roi_align"
    CASES = C.caffe2_cases(27)[::8]
    CATALOGUE_KEY = "Caffe2 RoIAlign"


class TestMMCVRoIAlignRotated(RoIOpTester):
    MODULE = "mmcv_roi_align_rotated"
    CASES = C.rotated_cases(28)[::3]
    CATALOGUE_KEY = "MMCVRoIAlignRotated"


class TestTorchvisionPSRoIAlign(RoIOpTester):
    MODULE = "torchvision_ps_roi_align"
    CASES = C.torchvision_ps_cases("TorchvisionPSRoIAlign", 29)[::8]
    CATALOGUE_KEY = "TorchvisionPSRoIAlign"
    GOLDEN_SUITE = "torchvision_ps_roi_align"


class TestPyramidRoIAlign(RoIOpTester):
    """A multi-level op: one spec and node per number of feature maps (its cases name theirs,
    L1 to L6), the nodes' spatial_scale_0 .. gathered into the kernel's spatial_scales; the
    boxes are input 0. (Its goldens and catalogue entries stay with test_goldens and
    test_bad_inputs.)"""

    MODULE = "pyramid_roi_align"
    CASES = C.pyramid_cases(30)[::2]


class TestMultiLevelRotatedRoiAlign(RoIOpTester):
    """mmdeploy's MMCVMultiLevelRotatedRoiAlign as convert writes it, L1 to L6 (the nodes'
    stride_0 .. gathered into featmap_strides; rotated rows, input 0). Its catalogue entries
    stay with test_bad_inputs, its plugin loop with test_multilevel_rotated."""

    MODULE = "multi_level_rotated_roi_align"
    CASES = C.rotated_multilevel_cases(31)[::2]


class TestPyramidRotatedRoIAlign(RoIOpTester):
    """MMRotate's extractor fused, L1 to L6 (the nodes' spatial_scale_0 .. gathered into
    spatial_scales; rotated rows, input 0; levels given, out of range on some rows, whose NaN
    is not read). The MMRotate stage graphs: tests/test_mmrotate.py."""

    MODULE = "pyramid_rotated_roi_align"
    CASES = C.pyramid_rotated_cases(32)[::2]


FAMILY = [TestRoIAlign, TestONNXRoiAlign, TestMMCVRoiAlign, TestCaffe2RoIAlign,
          TestMMCVRoIAlignRotated, TestTorchvisionPSRoIAlign, TestPyramidRoIAlign,
          TestMultiLevelRotatedRoiAlign, TestPyramidRotatedRoIAlign]


def test_the_template_runs_every_case_it_took_over():
    """The catalogue entries and golden suites that test_bad_inputs and test_goldens leave to
    the template are exactly those of this family's subclasses, and each subclass has cases:
    nothing moved here is dropped."""
    assert {c.CATALOGUE_KEY for c in FAMILY} - {None} == test_bad_inputs.BY_TEMPLATE
    assert {c.GOLDEN_SUITE for c in FAMILY} - {None} == test_goldens.BY_TEMPLATE
    for cls in FAMILY:
        assert cls.CASES and cls.entry().kernel.__module__ == f"ort_roi.ops.{cls.MODULE}"
        # every node the bridge runs (each number of levels, each domain) has a case
        registered = [f for f in cls.entry().forms if f.registered]
        assert [f for f, _ in cls.bridged()] == registered, cls.__name__
    assert all(any(c.op == key for c in test_bad_inputs.CATALOGUE)
               for key in test_bad_inputs.BY_TEMPLATE)
