"""The package's structure: its import graph has no cycle, and no module reaches into another
for an underscore name."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "ort_roi"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("ort_roi",) + path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(name: str):
    """(imported module, imported names) for every import in ``name``, anywhere in the file,
    resolved within the package."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "ort_roi":
                    yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name).split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "ort_roi":
                mod = node.module
            else:
                continue
            yield mod, [a.name for a in node.names]


def _graph() -> dict[str, set[str]]:
    edges = {m: set() for m in MODULES}
    for m in MODULES:
        for mod, names in _imports(m):
            # "from pkg import sub" imports pkg.sub; "from pkg import name", pkg itself
            subs = {f"{mod}.{n}" for n in names} & set(MODULES)
            targets = subs if subs and len(subs) == len(names) else subs | {mod}
            edges[m] |= {t for t in targets if t in MODULES and t != m}
    return edges


def test_the_import_graph_is_acyclic():
    edges = _graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert len(edges) > 30  # the walk saw the package


def test_no_module_imports_an_underscore_name_from_another():
    bad = []
    for m in MODULES:
        for mod, names in _imports(m):
            parts = mod.split(".") + names
            bad += [f"{m}: {mod} {n}" for n in parts
                    if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
    assert bad == []


def _repository_python(folder: str) -> list[pathlib.Path]:
    return sorted((ROOT.parent / folder).rglob("*.py"))


def test_tests_and_tools_are_packages_that_leave_sys_path_alone():
    """tests/ and tools/ are packages: pytest puts the repository root on ``sys.path`` (tests/
    has an ``__init__.py``), a tool runs from the root as ``python -m tools.<name>``, and both
    import what they share as ``from tests import cases`` / ``from tools import tf_e2e``. No
    file in either reads or changes ``sys.path`` (a child process gets the root on
    PYTHONPATH), nor loads a file by its path; every tool says how it is run."""
    import re

    for folder in ("tests", "tools"):
        assert (ROOT.parent / folder / "__init__.py").is_file(), folder
    by_text = re.compile(r"sys\.path\.\w+\(|sys\.path\s*(\[|=|\+=)|spec_from_file_location")
    bad = []
    for path in _repository_python("tests") + _repository_python("tools"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Attribute) and node.attr == "path"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys") or (
                    isinstance(node, ast.ImportFrom) and node.module == "sys"
                    and "path" in [a.name for a in node.names]):
                bad.append(f"{path.name}:{node.lineno}")
        bad += [f"{path.name}: {m.group(0)!r}" for m in by_text.finditer(text)
                if path.name != "test_architecture.py"]  # the pattern itself, above
    assert bad == []
    tools = [p for p in _repository_python("tools") if p.name != "__init__.py"]
    assert len(tools) > 10
    for path in tools:  # the usage in its docstring, and a main
        text = path.read_text()
        assert f"-m tools.{path.stem}" in ast.get_docstring(ast.parse(text)), path.name
        assert 'if __name__ == "__main__":' in text, path.name


def test_the_layout_shows_the_flow():
    """graph -> rewrite -> session -> bridge -> kernels, each in its folder; the ops in ops/;
    the CUDA backend reads nothing of the NumPy kernels (only the shared geometry)."""
    for folder in ("graph", "runtime", "kernels", "kernels/cpu", "kernels/cuda", "definitions",
                   "cli", "ops"):
        assert (ROOT / folder / "__init__.py").is_file(), folder
    cuda = {mod for m in MODULES if m.startswith("ort_roi.kernels.cuda")
            for mod, _ in _imports(m)}
    assert not {m for m in cuda if m.startswith("ort_roi.kernels.cpu")}, cuda


def test_the_bench_is_a_command_over_its_parts():
    """``ort-roi bench`` is split by concern (cli/bench_*.py): the command (cli/bench.py) sits
    on top, imported by the CLI alone; the timing harness (bench_timing, which tools/ shares)
    reaches no other part of the bench, and the runners (bench_peers) no workload or row."""
    edges = _graph()
    bench = {m for m in MODULES if m.startswith("ort_roi.cli.bench")}
    assert {m for m in MODULES if "ort_roi.cli.bench" in edges[m]} == {"ort_roi.cli.main"}
    assert not edges["ort_roi.cli.bench_timing"] & bench
    assert edges["ort_roi.cli.bench_peers"] & bench == {"ort_roi.cli.bench_timing"}

def _op_modules() -> list[str]:
    return sorted(m for m in MODULES if m.startswith("ort_roi.ops.") and m != "ort_roi.ops")


def test_every_op_module_is_one_entry_in_the_registry():
    """Each module of ort_roi/ops holds one ENTRY, and ops.ENTRIES lists every one of them
    exactly once: an op cannot exist without being registered, or be registered twice."""
    import importlib

    from ort_roi import ops

    entries = [importlib.import_module(m).ENTRY for m in _op_modules()]
    assert len(entries) == len(ops.ENTRIES) == len(set(map(id, ops.ENTRIES)))
    assert {id(e) for e in entries} == {id(e) for e in ops.ENTRIES}
    keys = [s.key for e in ops.ENTRIES for s in e.specs]
    assert len(keys) == len(set(keys))


#: The calls that hand a step to the backend table: ``compute`` itself, the RoIAlign
#: family's check -> bins -> compute helper (kernels.checks.compute_align) and the per-level
#: loop (kernels.dispatch.compute_by_level), which take the step the same way.
COMPUTE = ("compute", "compute_align", "compute_by_level")


def _compute_steps(module: str) -> set[str]:
    """The steps a module's code hands to ``compute``: its first argument, ``steps.<name>``
    (a Step referenced by name; a string or any other expression fails), every other
    argument but the data by keyword (the dispatch slices per-box arguments by name)."""
    steps = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in COMPUTE:
            first = node.args[0] if node.args else None
            assert (isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name)
                    and first.value.id == "steps"), (module, ast.unparse(node))
            assert len(node.args) == 2, (module, "by keyword", ast.unparse(node))
            steps.add(first.attr)
    return steps


@pytest.mark.parametrize("module", _op_modules())
def test_every_entry_is_complete(module):
    """An entry says everything a reader and the tooling need: each spec documented (source,
    doc, every input, attribute and output), its forms computed by its specs, a kernel with an
    Args/Returns docstring, a definition from ort_roi.definitions, and exactly the compute
    steps its code dispatches, each in the backend table."""
    import importlib

    from ort_roi.kernels.dispatch import TABLE

    e = importlib.import_module(module).ENTRY
    for s in e.specs:
        assert s.source and s.doc, s.name
        assert all(i.doc and i.shape for i in s.inputs), s.name
        assert all(a.doc for a in s.attrs), s.name
        assert s.outputs and all(o.shape for o in s.outputs), s.name
        assert s.shapes is not None and (s.pooled is not None or s.shapes.__name__ !=
                                         "pooled_shapes"), s.name
    assert e.forms and all(any(f.computed_by(s) for s in e.specs) for f in e.forms)
    assert any(f.registered for f in e.forms)
    public = [getattr(importlib.import_module(module), n) for n in dir(importlib.import_module(
        module)) if getattr(getattr(importlib.import_module(module), n), "__module__", None)
        == module and callable(getattr(importlib.import_module(module), n))
        and not n.startswith("_")]
    kernels = [f for f in public if (f.__doc__ or "").find("Args:") >= 0]
    assert kernels, f"{module}: no kernel with an Args/Returns docstring"
    assert all("Returns:" in f.__doc__ for f in kernels), module
    assert e.definition.__module__.startswith("ort_roi.definitions."), e.definition
    assert all(TABLE.get(t.name) is t for t in e.steps), e.steps
    assert _compute_steps(module) == {t.name for t in e.steps}, module
    kernel = e.kernel  # the public kernel: defined in its module, documented, ops.<name>
    assert kernel.__module__ == module and not kernel.__name__.startswith("_"), kernel
    assert "Args:" in kernel.__doc__ and "Returns:" in kernel.__doc__, kernel
    assert getattr(importlib.import_module("ort_roi.ops"), kernel.__name__) is kernel


def test_every_kernel_goes_through_the_dispatch_table():
    """No op reaches a backend directly: the ops import neither kernels/cpu nor kernels/cuda
    (only kernels.dispatch, which picks NumPy or CUDA by where the data is), and every step of
    the table is some op's."""
    from ort_roi import ops
    from ort_roi.kernels.dispatch import TABLE

    for m in _op_modules() + ["ort_roi.ops"]:
        reached = {mod for mod, _ in _imports(m)}
        assert not {x for x in reached if x.startswith(("ort_roi.kernels.cpu",
                                                         "ort_roi.kernels.cuda"))}, m
    assert {s.name for e in ops.ENTRIES for s in e.steps} == set(TABLE)


def test_the_registry_is_one_list():
    """Adding an op adds its module's name to ``ops.MODULES`` and nothing else: ENTRIES,
    SPECS, FORMS and the public kernels are derived from it, and ops/__init__.py names no
    op module anywhere else (no import of one, no list of entries or kernels)."""
    import importlib

    from ort_roi import ops

    assert ops.ENTRIES == tuple(importlib.import_module(f"ort_roi.ops.{m}").ENTRY
                                for m in ops.MODULES)
    assert sorted(f"ort_roi.ops.{m}" for m in ops.MODULES) == _op_modules()
    assert ops.KERNELS == {e.kernel.__name__: e.kernel for e in ops.ENTRIES}
    # the product's own ops are those their entry says are (own=True), not a slice of the list
    assert ops.SPECS == tuple(e.spec for e in ops.ENTRIES if e.own)
    assert [s.name for s in ops.SPECS] == ["ROIPooling", "RoIPool", "PSROIPool", "RoIAlign"]
    tree = ast.parse(MODULES["ort_roi.ops"].read_text())
    assert not [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                and getattr(n.value, "id", None) == "ENTRIES"]  # no meaning in ENTRIES' order
    assert not [ast.unparse(n) for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.level == 1]  # from . / from .x import
    for n in ast.walk(tree):  # no op's kernel or module named but in MODULES' strings
        if isinstance(n, (ast.Name, ast.Attribute)):
            assert getattr(n, "id", getattr(n, "attr", None)) not in ops.KERNELS, ast.unparse(n)


def test_no_module_outside_the_entries_switches_on_an_op():
    """Registration, schemas, builders, generated inputs, info and validate read the
    entries' specs, not the name or kind of an op: they never import an op's module."""
    readers = ["ort_roi.runtime.bridge", "ort_roi.graph.schemas", "ort_roi.graph.builders",
               "ort_roi.graph.inputs", "ort_roi.cli.info", "ort_roi.cli.validate",
               "ort_roi.cli.compare", "ort_roi.cli.convert",
               "ort_roi.graph.reference", "ort_roi.graph.rewrite"]
    for m in readers:
        reached = {mod for mod, _ in _imports(m)}
        assert not {x for x in reached if x.startswith("ort_roi.ops.")}, m


def _public_api() -> list:
    """(name, object) of every public function and class: ``ort_roi.__all__``,
    ``ort_roi.builders.__all__``, ``ort_roi.ops.__all__`` (registry and kernels) and
    ``ort_roi.scale.__all__``; modules and constants are left out."""
    import inspect

    import ort_roi
    from ort_roi import builders, ops, scale

    found = [(f"{m.__name__}.{n}", getattr(m, n)) for m in (ort_roi, builders, ops, scale)
             for n in m.__all__]
    return [(n, o) for n, o in found if inspect.isclass(o) or inspect.isfunction(o)]


def _doc_problems(name: str, f, skip_first: bool = False) -> list[str]:
    """What the docstring of function ``f`` lacks: a summary, "Args:" when it takes arguments
    (beyond ``self``), "Returns:" unless it returns None."""
    import inspect

    doc = inspect.getdoc(f) or ""
    if not doc.strip():
        return [f"{name}: no docstring"]
    sig = inspect.signature(f)
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    problems = []
    if params and "Args:" not in doc:
        problems.append(f"{name}: takes {', '.join(p.name for p in params)} but has no Args:")
    if sig.return_annotation not in (None, "None") and "Returns:" not in doc:
        problems.append(f"{name}: has no Returns:")
    return problems


def test_the_public_api_is_documented():
    """Every public function and class documents itself in the Args/Returns style of
    torchvision's ops: functions say their arguments (Args:) and what they return (Returns:),
    classes their constructor's arguments, and their public methods likewise. The three
    roi_aligns say in their first line which one they are: the kernel that computes
    (ort_roi.ops), the ONNX node (ort_roi.builders), the readable definition."""
    import inspect

    from ort_roi import builders, ops
    from ort_roi.definitions import align

    api = _public_api()
    assert len(api) >= 30, [n for n, _ in api]
    problems = []
    for name, obj in api:
        if inspect.isfunction(obj):
            problems += _doc_problems(name, obj)
            continue
        if not obj.__dict__.get("__doc__"):
            problems.append(f"{name}: class without its own docstring")
            continue
        init = list(inspect.signature(obj).parameters)
        # a NamedTuple's constructor takes its fields: its Attributes: (Google style, what
        # the API reference's docstring parser reads as the fields) say them
        fields = getattr(obj, "_fields", None) if issubclass(obj, tuple) else None
        if fields and "Attributes:" in obj.__doc__:
            missing = [f for f in fields if f"{f}:" not in obj.__doc__]
            if missing:
                problems.append(f"{name}: its fields {', '.join(missing)} not in Attributes:")
        elif init and "Args:" not in obj.__doc__:
            problems.append(f"{name}: its constructor takes {', '.join(init)}; no Args:")
        for attr, member in vars(obj).items():
            if attr.startswith("_") and attr != "__call__":
                continue
            if isinstance(member, property):
                if not (member.__doc__ or "").strip():
                    problems.append(f"{name}.{attr}: property without a docstring")
            elif inspect.isfunction(member):
                problems += _doc_problems(f"{name}.{attr}", member, skip_first=True)
    assert not problems, "\n".join(problems)

    def first(f) -> str:
        return inspect.getdoc(f).splitlines()[0]

    assert "kernel" in first(ops.roi_align), first(ops.roi_align)
    assert "definition" in first(align.roi_align), first(align.roi_align)
    for node in (builders.roi_align, builders.roi_pool, builders.roi_pooling,
                 builders.psroi_pool, builders.make_node):
        assert "node (ONNX NodeProto)" in first(node), first(node)


def test_the_exporters_passes_run_from_one_table():
    """rewrite (convert, the front door) reaches the exporters' recognisers only through
    ``graph.exporters`` (who wrote a graph, told once; the passes each exporter's graphs get):
    it imports none of them, and every recogniser module has its passes in the table."""
    from ort_roi.graph import exporters

    recognisers = {f"ort_roi.graph.{m}" for m in ("aligned_note", "fusion", "loops", "mxnet",
                                                   "paddle", "scatter_nd", "tensorflow")}
    inside = {m for m in MODULES if m.rsplit(".", 1)[0] in recognisers}  # a package's modules
    edges = _graph()
    for m in ("ort_roi.graph.rewrite", "ort_roi.runtime.session", "ort_roi.cli.validate"):
        assert not edges[m] & (recognisers | inside), m
    assert edges["ort_roi.graph.exporters"] >= recognisers
    names = [e.name for e in exporters.EXPORTERS]
    assert len(names) == len(set(names)) and exporters.NAMES == (*names, exporters.NONE)
    for e in exporters.EXPORTERS:
        for p in e.passes:  # a repair that finds its forms elsewhere says what they stay as
            assert p.needs and (p.find is None or p.repair and p.left and p.gives), p


#: The longest a module outside kernels/ may grow before it is split by concern (the issue
#: "A house a newcomer can maintain": ~400 lines; the kernels hold long, single-purpose loops).
MAX_MODULE_LINES = 450


def test_no_module_outside_the_kernels_outgrows_one_concern():
    long = {name: n for name, path in MODULES.items()
            if ".kernels" not in name
            and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, (f"modules over {MAX_MODULE_LINES} lines (split them by concern, as "
                      f"cli/bench_*.py, scale/, geometry/ and graph/tensorflow/ are): {long}")


def test_every_kernel_shows_its_signature():
    """``@quiet`` keeps each kernel's signature: ``inspect.signature`` (following
    ``__wrapped__`` or not) shows the kernel's own parameters, no ``**kwargs``: every
    attribute of its spec a keyword parameter and every input a parameter (those a
    multi-level node holds one a feature map, attr_0 .., feat_0 .., gathered by its node)."""
    import inspect
    import re

    from ort_roi import ops

    for e in ops.ENTRIES:
        k = e.kernel
        sig = inspect.signature(k, follow_wrapped=False)
        assert sig == inspect.signature(inspect.unwrap(k)), k.__name__
        params = sig.parameters
        assert not [p for p in params.values() if p.kind == p.VAR_KEYWORD], (k.__name__, sig)
        star = [p for p in params.values() if p.kind == p.VAR_POSITIONAL]
        for s in e.specs:
            for a in s.attrs:
                if re.search(r"_\d+$", a.name) and e.node is not None:
                    continue  # one a feature map: the node gathers them into a list
                assert a.name in params and params[a.name].kind in (
                    inspect.Parameter.KEYWORD_ONLY,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD), (k.__name__, a.name, sig)
            for i in s.inputs:
                assert i.name in params or (star and re.search(r"_\d+$", i.name)), (
                    k.__name__, i.name, sig)


def test_the_fast_lane_names_test_modules():
    """``pytest -m fast`` runs tests/conftest.py's FAST modules: each one exists."""
    from tests.conftest import FAMILIES, FAST

    here = pathlib.Path(__file__).parent
    assert FAST and all((here / f"{m}.py").is_file() for m in FAST + FAMILIES), FAST
