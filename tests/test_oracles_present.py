"""CI's guard that the live parity tests ran: the oracles named by ORT_ROI_REQUIRE_ORACLES
(a comma-separated list of modules, ``mxnet`` meaning the MXNet venv named by MXNET_PYTHON)
are importable, so the tests that skip without them did not skip. .ci/run sets it; without
it this test skips."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

REQUIRED = [m.strip() for m in os.environ.get("ORT_ROI_REQUIRE_ORACLES", "").split(",")
            if m.strip()]


@pytest.mark.skipif(not REQUIRED, reason="ORT_ROI_REQUIRE_ORACLES is not set (.ci/run sets it)")
@pytest.mark.parametrize("module", REQUIRED or ["-"])
def test_required_oracle_is_installed(module):
    if module == "mxnet":  # its own venv (numpy 1.23.5)
        py = os.environ.get("MXNET_PYTHON", "")
        r = subprocess.run([py, "-c", "import mxnet, gluoncv, onnx"], capture_output=True,
                           text=True) if py else None
        assert r is not None and r.returncode == 0, (py, r and r.stderr[-2000:])
    elif module == "ppdet":  # imports only once tests/paddle_models.import_ppdet has patched it
        assert importlib.util.find_spec(module) is not None, module
    else:  # imports (in a child: torch, paddle and openvino need not share this process)
        r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                           text=True)
        assert r.returncode == 0, (module, r.stderr[-2000:])
