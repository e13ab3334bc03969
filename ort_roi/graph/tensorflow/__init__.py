"""tf2onnx's graphs: TensorFlow's ``tf.image.crop_and_resize`` as tf2onnx writes it, replaced
by one ort_roi::CropAndResize node (TensorFlow's float32 arithmetic, exactly), and the layers
after the crops that tf2onnx converted from a shape it lacked or had wrong, repaired.

- ``forms.py``: the forms tf2onnx writes (a Loop over the boxes, com.microsoft's
  CropAndResize) and how each is recognised, exactly;
- ``fuse.py``: the pass (``fuse_crop_and_resize``) that replaces them, and
  ``find_crop_and_resize``, what it would replace;
- ``layers.py``: the layers reading the crops that tf2onnx left half converted or converted
  from a wrong shape, and what TF's layer may have been (each one's readings);
- ``repair.py``: ``repair_layers``, which rewrites such a layer where one reading is left.

``graph/exporters.py`` runs the pass on tf2onnx's graphs.
"""

from .fuse import find_crop_and_resize, fuse_crop_and_resize

__all__ = ["find_crop_and_resize", "fuse_crop_and_resize"]
