"""Every code block of README.md, models/README.md and the pages of docs/ runs as written.

Each fenced block is one test, run in a temporary directory that holds the repository's
``models/``, ``docs/`` and ``mkdocs.yml`` (the snippets' relative paths): ``python`` blocks as a script in a fresh
interpreter (a comment after a ``print(...)`` is what it must print; `` ...`` ends a prefix);
``bash`` blocks command by command, except the install and test-suite commands of the Quick
start (``pip install``, ``python -m pytest``: CI runs those); ``console`` blocks run each
``$ `` command and check that every output line shown (``...`` stands for any lines) is among
what it prints. A block that needs an optional extra skips, naming the extra to install; a
block in another language (``text``) is not run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import onnx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ["README.md", "models/README.md",
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash", "console")

#: top-level module -> the extra that installs it
EXTRAS = {"torch": "torchvision", "torchvision": "torchvision", "onnxscript": "torchvision",
          "paddle": "parity", "openvino": "parity", "cupy": "cupy", "matplotlib": "plot",
          "ray": "ray", "paddle2onnx": "paddle", "mkdocs": "docs"}
#: commands of a bash block that the test does not run (CI runs the Quick start's)
NOT_RUN = ("pip install", "python -m pytest")


def blocks(doc: str) -> list[tuple[str, int, str]]:
    """(language, line of the opening fence, code) of every fenced block of ``doc``."""
    text = (ROOT / doc).read_text()
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        out.append((m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


CASES = [pytest.param(doc, lang, code, id=f"{doc}:{line}:{lang}")
         for doc in DOCS for lang, line, code in blocks(doc) if lang in RUN]


def missing_extra(code: str) -> str | None:
    """The skip reason for a block that imports (or, for a command, needs) a module of an
    extra that is not installed; None when everything it needs is here."""
    mods = set(re.findall(r"^\s*import\s+([^\n#;]+)", code, re.M))  # a, b as c, d
    mods |= set(re.findall(r"^\s*from\s+([\w.]+)", code, re.M))
    names = {n.strip().split(".")[0].split(" ")[0] for m in mods for n in m.split(",")}
    if "--plot" in code:
        names.add("matplotlib")
    if "paddle_export" in code or "export-paddle" in code:
        names.add("paddle2onnx")
    if re.search(r"^\s*mkdocs\b|&&\s*mkdocs\b", code, re.M):
        names.add("mkdocs")
    if "detectron2" in names and importlib.util.find_spec("detectron2") is None:
        # no extra brings it: detectron2 installs from its source repository only
        return "needs detectron2, from its source repository (docs/exporters.md)"
    for name in sorted(names & set(EXTRAS)):
        if importlib.util.find_spec(name) is None:
            extra = EXTRAS[name]
            return f"needs {name}: pip install '.[{extra}]'"
    return None


def _broken_model(path: pathlib.Path) -> None:
    """The README's ``broken.onnx``: fast_rcnn_head.onnx with ROIPooling's pooled_h dropped."""
    m = onnx.load(str(ROOT / "models" / "fast_rcnn_head.onnx"))
    node = next(n for n in m.graph.node if n.op_type == "ROIPooling")
    keep = [a for a in node.attribute if a.name != "pooled_h"]
    del node.attribute[:]
    node.attribute.extend(keep)
    onnx.save(m, str(path))


@pytest.fixture
def workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "models").symlink_to(ROOT / "models", target_is_directory=True)
    (tmp_path / "docs").symlink_to(ROOT / "docs", target_is_directory=True)
    (tmp_path / "mkdocs.yml").symlink_to(ROOT / "mkdocs.yml")
    _broken_model(tmp_path / "broken.onnx")
    return tmp_path


def _run(cmd: list[str] | str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    bindir = os.path.dirname(sys.executable)  # ort-roi of this interpreter's environment
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                          shell=isinstance(cmd, str))


def _commands(code: str) -> list[str]:
    """The commands of a bash block (continuation lines joined, ``&&`` chains split)."""
    lines = code.replace("\\\n", " ").splitlines()
    cmds = [c.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")
            for c in ln.split("&&")]
    return [c for c in cmds if c]


def _printed(code: str) -> list[str]:
    """What a python block says it prints: the comment after each ``print(...)``."""
    out = []
    for m in re.finditer(r"^\s*print\(.*\)\s*#\s*(.+)$", code, re.M):
        out.append(m.group(1).split(" ...")[0].strip())
    return out


@pytest.mark.parametrize("doc, lang, code", CASES)
def test_snippet_runs_as_written(doc: str, lang: str, code: str, workdir: pathlib.Path):
    reason = missing_extra(code)
    if reason:
        pytest.skip(reason)
    if lang == "python":
        (workdir / "snippet.py").write_text(code)
        r = _run([sys.executable, "snippet.py"], workdir)
        assert r.returncode == 0, f"{doc} snippet failed:\n{code}\n{r.stdout}\n{r.stderr}"
        for expected in _printed(code):
            assert expected in r.stdout, (expected, r.stdout)
    elif lang == "bash":
        for cmd in _commands(code):
            if cmd.startswith(NOT_RUN):
                continue
            r = _run(cmd, workdir)
            assert r.returncode == 0, f"{doc}: `{cmd}` failed:\n{r.stdout}\n{r.stderr}"
    else:  # console: "$ command", then the lines it prints ("..." for any lines)
        # the package's graphs where the docs name them, as in the repository (only for
        # commands: a folder ort_roi/ here would shadow the package in a Python snippet)
        (workdir / "ort_roi").mkdir()
        (workdir / "ort_roi" / "data").symlink_to(ROOT / "ort_roi" / "data",
                                                  target_is_directory=True)
        parts = re.split(r"^\$ (.*)$", code, flags=re.M)[1:]
        assert parts, f"{doc}: a console block without a '$ ' command"
        for cmd, shown in zip(parts[::2], parts[1::2]):
            r = _run(cmd, workdir)
            printed = (r.stdout + r.stderr).splitlines()
            for line in shown.strip("\n").splitlines():
                if line.strip() != "...":
                    assert line in printed, f"{doc}: `{cmd}` did not print {line!r}:\n" + \
                        "\n".join(printed)


def test_every_readme_block_is_run_or_marked_as_text():
    """A block of the README or a docs page is run by the test above unless it says it is
    text; the README keeps its Quick start and first example, the pages the rest."""
    langs = {lang for doc in DOCS for lang, _, _ in blocks(doc)}
    assert langs <= set(RUN) | {"text"}, langs
    assert sum(1 for c in CASES if c.values[0] == "README.md") >= 2
    assert sum(1 for c in CASES if c.values[0].startswith("docs/")) >= 12
    assert {"docs/usage.md", "docs/pytorch.md", "docs/scaling.md", "docs/development.md"} \
        <= {c.values[0] for c in CASES}


def test_snippets_download_nothing():
    """torchvision's detection constructors download trained weights by default; the README's
    snippets ask for none (they run where there is no internet)."""
    for doc in DOCS:
        for lang, line, code in blocks(doc):
            for call in re.findall(r"models\.detection\.\w+\((.*?)\)", code, re.S):
                assert "weights=None" in call and "weights_backbone=None" in call, (doc, line)


def test_builders_importable_by_the_documented_name():
    """README: ``ort_roi.builders``: ``import ort_roi.builders`` as well as the attribute."""
    r = _run([sys.executable, "-c", "import ort_roi.builders as b; from ort_roi import builders;"
              " m = b.single_op_model('RoIAlign', pooled_height=7, pooled_width=7);"
              " print(m.graph.node[0].op_type, builders.make_node is b.make_node)"], ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["RoIAlign", "True"]


def test_mkdocs_blocks_skip_without_the_docs_extra():
    assert "mkdocs" in str(missing_extra("pip install '.[docs]' && mkdocs build --strict")) \
        or importlib.util.find_spec("mkdocs") is not None
    assert missing_extra("ort-roi convert a.onnx b.onnx  # not mkdocs") is None


def test_commands_split():
    assert _commands("pip install . && ort-roi demo\n# c\npython -m pytest -q\n") == [
        "pip install .", "ort-roi demo", "python -m pytest -q"]
    assert [c for c in _commands("pip install . && ort-roi demo") if not c.startswith(NOT_RUN)] \
        == ["ort-roi demo"]


def test_every_skip_for_a_missing_extra_names_the_extra():
    """A test that skips because an optional module is missing says which extra brings it
    (the Quick start promises it): every ``pytest.importorskip`` of an extra's module and every
    ``skipif`` on paddle / openvino has ``reason="... pip install '.[EXTRA]'"``."""
    import ast

    seen = 0
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            reason = next((k.value.value for k in node.keywords if k.arg == "reason"
                           and isinstance(k.value, ast.Constant)), "")
            if node.func.attr == "importorskip":
                extra = EXTRAS.get(node.args[0].value.split(".")[0])
            elif node.func.attr == "skipif":
                cond = ast.unparse(node.args[0]) if node.args else ""
                extra = next((EXTRAS[m] for m in ("paddle", "openvino", "cupy", "torch")
                              if m in cond), None)
            else:
                continue
            if extra:
                seen += 1
                assert f"pip install '.[{extra}]'" in reason, \
                    f"{path.name}:{node.lineno}: skip reason {reason!r} names no extra"
    assert seen >= 20


def test_the_test_command_ends_with_its_skips_by_reason(tmp_path):
    """The README's promise: the test command ends with how many tests skipped for each
    reason (tests/skips.py, the hook tests/conftest.py holds), most first; xfails are not
    skips. Run as pytest runs it, on a sample file whose conftest takes the same hook."""
    (tmp_path / "conftest.py").write_text("from tests.skips import pytest_terminal_summary"
                                          "  # noqa: F401\n")
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('i', range(3))\n"
        "def test_a(i):\n    pytest.skip(\"needs torch: pip install '.[torchvision]'\")\n"
        "def test_b():\n    pytest.importorskip('no_such_module_here', reason='needs it')\n"
        "@pytest.mark.xfail(reason='not a skip')\n"
        "def test_c():\n    assert 0\n"
        "def test_d():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "test_sample.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, s in enumerate(lines) if "4 skipped, by reason" in s)
    assert lines[head + 1:head + 3] == ["     3  needs torch: pip install '.[torchvision]'",
                                        "     1  needs it"], r.stdout
    assert "1 passed, 4 skipped, 1 xfailed" in lines[head + 3], r.stdout
