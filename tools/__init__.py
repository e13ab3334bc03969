"""ort_roi's developer tools, a package run from the repository root as ``python -m tools.<name>``
(``--help`` on each). By family:

- bench: ``bench_crop_and_resize``, ``bench_proposals``, ``tf_bench``, ``paddle_stage_bench``,
  ``gpu_bench`` (and ``gpu_check.sh``, the whole GPU check for a lent machine), ``ray_load``;
  all time with ``ort_roi.cli.bench.time_together`` (or ``ort-roi bench`` itself);
- end to end: ``torchvision_e2e``, ``paddledet_e2e``, ``paddle_rfcn_e2e``, ``tf_e2e``,
  ``mxnet_graphs gluoncv / compare / precision``;
- goldens and shipped graphs: ``make_goldens``, ``make_proposal_goldens``,
  ``make_tf_goldens``, ``make_tf_graphs``, ``mxnet_graphs ops``, ``export_torchvision``,
  ``make_models``.

The cases they share with the tests are the tests' (``from tests import cases``); nothing here
touches ``sys.path`` (tests/test_architecture.py holds to it). This file imports nothing, so
the MXNet venv (numpy 1.23, no ort_roi) can run ``python -m tools.mxnet_graphs``.
"""
