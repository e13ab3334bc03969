"""What each op computes, written to be read: one box, one bin, one sample at a time, from
the geometry vocabulary (ort_roi.geometry), in T as the source framework computes it.

These are the definitions the fast kernels (``ort_roi.ops``) are held to; each op's entry
(``ort_roi.ops.<op>.ENTRY.definition``) names its own, and ``ort_roi.ops.define`` calls it
with the attributes resolved by the op's spec. onnx.reference runs them (``ort-roi validate``
and the demo compare onnxruntime's run of a graph with them) and the tests compare every fast
strategy with them. They take what the kernels take, every attribute given, without the checks,
and are slow (Python loops over bins and samples, vectorized over channels only). The
semantics in words: docs/semantics.md.
"""
