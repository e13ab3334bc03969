"""ort_roi: region-of-interest ops for onnxruntime, exact to their source frameworks.

    import onnxruntime, ort_roi
    sess = onnxruntime.InferenceSession("model.onnx", ort_roi.session_options())
    # or, raising ort_roi.RoiOpError on bad input and with exact float attributes:
    sess = ort_roi.InferenceSession("model.onnx")
    # or rewrite a graph once (ONNX RoiAlign / MaxRoiPool into ort_roi) for plain sessions:
    model = ort_roi.convert(onnx.load("model.onnx"))
    # and what it did and did not do (nodes moved; notes: a stage left unfused and why, ...):
    model, done = ort_roi.convert(onnx.load("model.onnx"), report=True)

The flow: graph (ort_roi.graph: builders, the rewrite pass) -> session (ort_roi.runtime:
session_options, the front door) -> bridge (ort_roi.runtime.bridge) -> kernels
(ort_roi.kernels: NumPy and CUDA) -- each op one entry of ort_roi.ops (spec, node forms,
kernel) held to its definition (ort_roi.definitions).
"""

__version__ = "0.1.0"

from . import ops  # noqa: E402
from .errors import RoiOpError  # noqa: E402
from .graph import builders, schemas  # noqa: E402
from .graph.rewrite import convert  # noqa: E402
from .kernels.device import get_backend, set_backend  # noqa: E402
from .kernels.cpu import workspace  # noqa: E402
from .kernels.cuda import staging  # noqa: E402
from .kernels.cpu.parallel import set_num_threads  # noqa: E402
from .runtime.heap import reuse_freed_memory  # noqa: E402
from .runtime.session import InferenceSession, session_options  # noqa: E402
from .ops import SPECS  # noqa: E402
from .spec import DOMAIN, OPSET_VERSION  # noqa: E402


def torch_export(model, args: tuple = (), f=None, **kwargs):
    """``torch.onnx.export`` with torchvision's RoI ops written as ort_roi nodes.

    torchvision's roi_align, roi_pool, ps_roi_align, ps_roi_pool and MultiScaleRoIAlign (one
    fused node per stage), Keypoint R-CNN's heatmaps_to_keypoints and Mask R-CNN's
    paste_masks_in_image (one node each, no per-box Loop) become ort_roi nodes that a plain
    onnxruntime session with ``ort_roi.session_options()`` runs, for both exporters. See
    ort_roi.export.pytorch. Needs torch and torchvision (``pip install
    '.[torchvision]'``); ``import ort_roi`` does not import them.

    Args:
        model: the ``torch.nn.Module`` to export, as ``torch.onnx.export`` takes it.
        args: its example inputs (a tuple of tensors, e.g. a float32 [N, 3, H, W] image
            batch), as ``torch.onnx.export`` takes them.
        f: where to write the model (a path), or None.
        **kwargs: every other keyword of ``torch.onnx.export``, ``dynamo`` included (torch's
            default when absent); with dynamo, a ``custom_translation_table`` of yours is
            kept (yours win over ort_roi's).

    Returns:
        What ``torch.onnx.export`` returns, its ``ONNXProgram`` with dynamo, else None.

    Raises:
        ImportError: torch or torchvision is not installed.
    """
    from .export.pytorch import torch_export as export

    return export(model, args, f, **kwargs)


def paddle_export(path_prefix, f=None, opset_version: int = 17, **kwargs):
    """A saved Paddle inference program to ONNX, with roi_align, roi_pool and psroi_pool exact.

    The RoI ops become ort_roi nodes (or standard ones with ``standard=True``); paddle2onnx
    runs in a child process. See ort_roi.export.paddle. Needs paddle and paddle2onnx (``pip
    install '.[paddle]'``); ``import ort_roi`` does not import them.

    Args:
        path_prefix: what ``paddle.jit.save`` or PaddleDetection's export wrote, without the
            suffix: ``PREFIX.json`` (PIR) or ``PREFIX.pdmodel``, with ``PREFIX.pdiparams``
            when the program has parameters.
        f: where to write the model too (a path), or None.
        opset_version: the default domain's opset asked of paddle2onnx (11-17 tested).
        **kwargs: ``standard`` (write standard ONNX nodes a plain onnxruntime runs),
            ``python`` (the Python that runs paddle2onnx), ``timeout`` (seconds, None: no
            limit); see ``ort_roi.export.paddle.paddle_export``.

    Returns:
        The ``onnx.ModelProto``, which ``onnxruntime.InferenceSession(model,
        ort_roi.session_options())`` runs (a plain session when ``standard``).

    Raises:
        RoiOpError: ops paddle2onnx cannot export, a program that cannot be loaded, the
            exporter's crash, or a RoI op with no standard form.
        ImportError: paddle2onnx or paddle missing in the Python that runs it.
    """
    from .export.paddle import paddle_export as export

    return export(path_prefix, f, opset_version, **kwargs)


def release_memory() -> int:
    """Let go of the buffers ort_roi keeps for reuse (every thread's).

    What stays cached is bounded anyway: ``ORT_ROI_CACHE_MB`` MiB (default 256) for the
    whole process, least recently used first out; on the "cupy" / "auto" backend each thread
    also keeps pinned host buffers for its copies to and from the GPU.

    Returns:
        The bytes released (0 when nothing was cached).
    """
    return workspace.release() + staging.release()


schemas.register()

__all__ = ["DOMAIN", "OPSET_VERSION", "SPECS", "InferenceSession", "RoiOpError", "builders",
           "convert", "get_backend", "ops", "paddle_export", "release_memory",
           "reuse_freed_memory", "session_options", "set_backend", "set_num_threads", "torch_export", "__version__"]
