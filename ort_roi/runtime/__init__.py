"""onnxruntime: SessionOptions with ort_roi's ops and the front door (session.py), what
onnxruntime refuses named in ort_roi's terms (diagnose.py), the Python-op bridge (bridge.py),
the attribute text it hands the ops read back exactly (attributes.py), where a failing op was
in its graph (locate.py), and what a plain session does with each node form (probe.py)."""
