"""The docs site builds: ``mkdocs build --strict`` over docs/ (every link and anchor between the
pages checked, mkdocs 1.6's ``validation:``) with the API reference generated from the
docstrings (mkdocstrings), which names every public function and class of ``ort_roi``.
Skips without the docs extra (``pip install '.[docs]'``), as CI's step does not."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="needs mkdocs: pip install '.[docs]'")
pytest.importorskip("mkdocstrings", reason="needs mkdocstrings: pip install '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    return out


def test_every_page_of_docs_is_built(site: pathlib.Path):
    """Each page of docs/ is in the site (and so in mkdocs.yml's nav: omitted_files warns)."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        assert (site / name).is_file(), page.name


def test_the_api_reference_names_the_public_api(site: pathlib.Path):
    """Every public callable of ``ort_roi.__all__`` (and each op's kernel) has its entry."""
    import ort_roi

    html = (site / "api" / "index.html").read_text()
    public = [n for n in ort_roi.__all__ if callable(getattr(ort_roi, n))
              and not isinstance(getattr(ort_roi, n), type(ort_roi))]
    assert {"InferenceSession", "convert", "session_options", "torch_export"} <= set(public)
    for name in public:
        assert f'id="ort_roi.{name}"' in html, name
    for name in ("roi_align", "psroi_pool", "crop_and_resize"):
        assert f'id="ort_roi.ops.{name}.{name}"' in html, name
    for name in ("ort_roi.builders.single_op_model", "ort_roi.scale.BatchPredictor"):
        assert f'id="{name}"' in html, name


def test_the_api_reference_shows_each_kernels_signature(site: pathlib.Path):
    """Each op's kernel is listed with its own parameters (``@quiet`` keeps them), the ones
    ``inspect.signature`` shows, not ``*args, **kwargs``."""
    import html as html_lib
    import inspect
    import re

    from ort_roi import ops

    page = (site / "api" / "index.html").read_text()
    for e in ops.ENTRIES:
        k = e.kernel
        at = page.find(f'id="{k.__module__}.{k.__name__}"')
        assert at >= 0, k.__name__
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", page[page.find(">", at) + 1:at + 5000]))
        heading = text[:text.find("¶")]
        shown = re.sub(r"\s+", "", heading.split(f"{k.__name__}(", 1)[1])
        params = inspect.signature(k).parameters.values()
        assert "**" not in shown or any(p.kind == p.VAR_KEYWORD for p in params), heading
        for p in params:
            star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
            assert re.search(rf"(^|,){re.escape(star + p.name)}[=,)]", shown), (k.__name__,
                                                                             p.name, heading)
