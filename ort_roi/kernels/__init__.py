"""Where the ops compute: the input checks every op shares (``checks``), the backend table
(``dispatch``: each compute step's NumPy implementation in ``cpu/`` and CUDA implementation in
``cuda/``), and which backend the registered ops use (``device``). The public kernels, one per
op, are in ``ort_roi.ops``.
"""
