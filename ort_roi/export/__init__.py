"""Exporting PyTorch models whose RoI ops ort_roi runs (pytorch.py; the detection stages it
fuses, pytorch_fused.py). torch is imported only when one of its functions is called."""
