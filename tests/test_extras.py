"""The extras declare tested ranges, CI pins the exact versions (issue 51, 7): an extra that
pinned ``torch==2.14.1`` replaced a user's torch on ``pip install 'ort-roi[torchvision]'``.
pyproject.toml's extras hold no exact pin; .ci/constraints.txt pins each package of the
extras CI installs with it, inside the extra's range; .ci/run installs the extras with it and
still runs the README's test command as written."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the extras .ci/run installs with .ci/constraints.txt (TensorFlow's venv: its own ranges)
CONSTRAINED = ("parity", "plot", "torchvision", "ray", "paddle", "docs")

requirements = pytest.importorskip("packaging.requirements",
                                   reason="needs packaging: pip install '.[test]'")


def _extras() -> dict[str, list]:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    return {k: [requirements.Requirement(r) for r in v] for k, v in extras.items()}


def _pins() -> dict[str, str]:
    lines = (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
    pins = [ln.split("#")[0].strip() for ln in lines]
    return dict(p.lower().split("==") for p in pins if p)


def test_no_extra_pins_an_exact_version():
    for extra, reqs in _extras().items():
        for r in reqs:
            for s in r.specifier:
                assert s.operator not in ("==", "===") or s.version.endswith(".*"), \
                    f"extra {extra!r}: {r} pins an exact version (pin it in .ci/constraints.txt)"


def test_ci_pins_each_constrained_extra_inside_its_range():
    extras, pins = _extras(), _pins()
    for extra in CONSTRAINED:
        for r in extras[extra]:
            name = r.name.lower()
            assert name in pins, f"{name} (extra {extra!r}) is not pinned in .ci/constraints.txt"
            assert r.specifier.contains(pins[name], prereleases=True), \
                f"{name}=={pins[name]} lies outside the extra {extra!r}'s range {r.specifier}"


def test_ci_installs_the_extras_with_the_constraints_and_runs_the_quick_start():
    run = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in run.splitlines()]
    assert "pip install -q '.[test]' && python -m pytest -q" in lines  # the README's, as written
    used = set()
    for ln in lines:
        for group in re.findall(r"pip install [^']*'\.\[([^\]]+)\]'", ln):
            extras = set(group.split(",")) & set(CONSTRAINED)
            assert not extras or "-c .ci/constraints.txt" in ln, ln
            used |= extras
    assert set(CONSTRAINED) - {"paddle"} <= used, used  # paddle2onnx: --no-deps, pinned too
    assert "pip install -q --no-deps -c .ci/constraints.txt paddle2onnx" in lines
