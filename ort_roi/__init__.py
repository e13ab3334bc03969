"""ort_roi: region-of-interest ops for onnxruntime, exact to their source frameworks.

    import onnxruntime, ort_roi
    sess = onnxruntime.InferenceSession("model.onnx", ort_roi.session_options())
    # or, raising ort_roi.RoiOpError on bad input and with exact float attributes:
    sess = ort_roi.InferenceSession("model.onnx")
    # or rewrite a graph once (ONNX RoiAlign / MaxRoiPool into ort_roi) for plain sessions:
    model = ort_roi.convert(onnx.load("model.onnx"))
"""

from . import kernels, schemas
from .backend import get_backend, set_backend
from .errors import RoiOpError
from .graph import convert
from .session import InferenceSession, session_options
from .specs import DOMAIN, OPSET_VERSION, SPECS


def release_memory() -> int:
    """Let go of the buffers ort_roi keeps for reuse (every thread's); returns the bytes.

    What stays cached is bounded anyway: ``ORT_ROI_CACHE_MB`` MiB (default 256) for the
    whole process, least recently used first out."""
    from .kernels import _workspace

    return _workspace.release()

__version__ = "0.1.0"

schemas.register()

__all__ = ["DOMAIN", "OPSET_VERSION", "SPECS", "InferenceSession", "RoiOpError", "convert",
           "get_backend", "kernels", "release_memory", "session_options", "set_backend",
           "__version__"]
