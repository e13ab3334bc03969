"""ONNX graphs: reading nodes (nodes.py), the rewrite pass behind convert and the front door
(rewrite.py), builders, ONNX schemas and onnx.reference ops for ort_roi's nodes, generated
inputs and the example detection heads."""
