"""Exporting PyTorch models whose RoI ops ort_roi runs (pytorch.py). torch is imported only
when one of its functions is called."""
