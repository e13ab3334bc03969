"""onnxruntime: SessionOptions with ort_roi's ops and the front door (session.py), the Python-op
bridge (bridge.py), where a failing op was in its graph (locate.py), and what a plain session
does with each node form (probe.py)."""
