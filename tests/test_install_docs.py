"""What the install docs say happens (issue 61, item 6): the torchvision extra does not keep
an older torch by itself (each torchvision requires its own release's torch or newer), so
docs/pytorch.md says to name your torch on the command line; the paddle extra's onnx pin has
no way out through pip, and docs/paddle.md says why."""

import importlib.metadata as md
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_torch_docs_no_longer_promise_the_extra_keeps_a_torch():
    text = (ROOT / "docs" / "pytorch.md").read_text()
    assert "a torch you have in that range is\nkept" not in text
    assert "**The extra alone does not keep an older torch you have**" in text
    assert "pip install '.[torchvision]' \"torch==$(python -c 'import torch; print(" \
           "torch.__version__.split(\"+\")[0])')\"" in text


def test_torchvision_requires_its_own_torch_or_newer():
    """The mechanism the docs name, read from the installed torchvision's metadata (the
    reason `.[torchvision]` over torch 2.13.0 installed torch 2.14.1): its torch requirement
    has a floor at its own release's torch, above an older torch of the extra's range."""
    try:
        reqs = md.requires("torchvision") or []
    except md.PackageNotFoundError:
        pytest.skip("needs torchvision: pip install '.[torchvision]'")
    torch = [r for r in reqs if re.match(r"torch\b", r) and "extra" not in r]
    assert torch, reqs
    floor = re.search(r"(>=|==)\s*(\d+)\.(\d+)", torch[0])
    assert floor, torch
    assert (int(floor.group(2)), int(floor.group(3))) > (2, 11), torch  # the extra's oldest


def test_the_paddle_docs_say_why_the_onnx_pin_has_no_way_out_through_pip():
    text = (ROOT / "docs" / "paddle.md").read_text()
    assert "pip has no way for a package to override what another declares" in text
    assert "pip install --no-deps 'paddle2onnx>=2.1,<2.2'" in text
