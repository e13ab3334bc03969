"""The docs site builds: ``mkdocs build --strict`` over docs/ (every link and anchor between the
pages checked, mkdocs 1.6's ``validation:``) with the API reference generated from the
docstrings (mkdocstrings), which names every public function and class of ``ort_roi`` and
shows no Sphinx role raw. The site's tests skip without the docs extra
(``pip install '.[docs]'``), as CI's step does not; the docstrings are read without it."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: A Sphinx role (``:class:`X```, ``:py:func:`f```): mkdocstrings shows it as it is written.
#: A docstring names an object of the API reference as mkdocstrings' cross-reference,
#: ``[`RoiOpError`][ort_roi.RoiOpError]``, and anything else in backticks.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const|ref|term|doc)"
                  r":`~?([^`]+)`")
#: Files whose docstrings still hold roles, each to be converted by its owner (then removed
#: from here: the test below fails on an entry with no role left)
PENDING: dict[str, str] = {}


def _roles() -> dict[str, list[tuple[int, str]]]:
    """Each file of ort_roi -> the (line, target) of every role in its docstrings."""
    out = {}
    for path in sorted((ROOT / "ort_roi").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=False)
            if not doc:
                continue
            first = node.body[0].lineno
            for m in ROLE.finditer(doc):
                line = first + doc.count("\n", 0, m.start())
                out.setdefault(path.relative_to(ROOT).as_posix(), []).append((line, m[1]))
    return out


def test_docstrings_hold_no_sphinx_role():
    """The API reference showed 19 raw roles (``:class:`ort_roi.RoiOpError```): mkdocstrings
    renders its own cross-references, not Sphinx's."""
    roles = _roles()
    raw = {f: r for f, r in roles.items() if not f.startswith(tuple(PENDING))}
    assert not raw, f"Sphinx roles in docstrings (write [`Name`][ort_roi.Name]): {raw}"
    done = [p for p in PENDING if not any(f.startswith(p) for f in roles)]
    assert not done, f"no role left under {done}: remove them from PENDING"


def test_the_role_pattern():
    found = [m[1] for m in ROLE.finditer(
        "a :class:`ort_roi.RoiOpError`, :py:func:`f`, :meth:`~C.m`; not [`X`][ort_roi.X],"
        " ``:class:`` or a: `b`")]
    assert found == ["ort_roi.RoiOpError", "f", "C.m"], found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    pytest.importorskip("mkdocs", reason="needs mkdocs: pip install '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="needs mkdocstrings: pip install '.[docs]'")
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


def test_the_api_reference_shows_no_raw_role_and_links_its_references(site: pathlib.Path):
    """No role reaches the page as text (but those of PENDING's files, until converted); the
    cross-references are links to the entries they name."""
    html = (site / "api" / "index.html").read_text()
    shown = re.findall(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const|ref|term|doc)"
                       r":<code>~?([^<]*)</code>", html)
    pending = {t for f, r in _roles().items() if f.startswith(tuple(PENDING)) for _, t in r}
    assert set(shown) <= pending, sorted(set(shown) - pending)
    assert "][ort_roi." not in html  # every cross-reference resolved
    link = re.compile(r'<a [^>]*href="#ort_roi\.RoiOpError"[^>]*>\s*<code>ort_roi.RoiOpError')
    assert len(link.findall(html)) >= 2  # InferenceSession's and ort_roi.ops' docstrings
