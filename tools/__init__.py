"""ort_roi's developer tools, a package run from the repository root as ``python -m tools.<name>``
(``--help`` on each). By family:

- bench: ``bench_crop_and_resize``, ``bench_proposals``, ``tf_bench``, ``paddle_stage_bench``,
  ``gpu_bench`` (and ``gpu_check.sh``, the whole GPU check for a lent machine); ``ray_load``
  (a Ray Serve deployment's throughput under load and faults);
- end to end: ``torchvision_e2e``, ``detectron2_graphs e2e / profile / bench``, ``paddledet_e2e``, ``paddle_rfcn_e2e``, ``tf_e2e``,
  ``mxnet_graphs gluoncv / compare / precision``.

One timing harness: ``ort_roi.cli.bench_timing.time_together`` (``ort-roi bench``'s own: runners
timed in turn each round, ``shuffle=seed`` for a fresh random order, ``min_sample_s=0`` for one
call per sample). Two timings are of another kind and stay their own: ``gpu_bench``'s CUDA
events (device time), and ``paddle_stage_bench.blocks`` (alternating blocks of calls, the
first of each dropped: it measures two sessions' intra-op threads spinning into each other).
- goldens and shipped graphs: ``make_goldens``, ``make_proposal_goldens``,
  ``make_tf_goldens``, ``make_tf_graphs``, ``mxnet_graphs ops``, ``export_torchvision``, ``detectron2_graphs stages``,
  ``make_models``.

The cases and models they share with the tests are the tests' (``from tests import cases``,
``from tests import paddle_models``); nothing here touches ``sys.path``
(tests/test_architecture.py holds to it). This file imports nothing, so
the MXNet venv (numpy 1.23, no ort_roi) can run ``python -m tools.mxnet_graphs``.
"""
