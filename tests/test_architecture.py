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


def test_the_layout_shows_the_flow():
    """graph -> rewrite -> session -> bridge -> kernels, each in its folder; the CUDA backend
    reads nothing of the NumPy kernels (only the shared geometry)."""
    for folder in ("graph", "runtime", "kernels", "kernels/cpu", "kernels/cuda", "definitions",
                   "cli"):
        assert (ROOT / folder / "__init__.py").is_file(), folder
    cuda = {mod for m in MODULES if m.startswith("ort_roi.kernels.cuda")
            for mod, _ in _imports(m)}
    assert not {m for m in cuda if m.startswith("ort_roi.kernels.cpu")}, cuda


def test_every_op_has_one_kernel_and_one_definition():
    """kernels.KERNELS and definitions.DEFINITIONS, the two registries keyed by spec, cover
    exactly the spec table's ops (a new op cannot miss either)."""
    from ort_roi import definitions, kernels, specs

    keys = {s.key for s in specs.all_specs()}
    assert set(kernels.KERNELS) == keys
    assert set(definitions.DEFINITIONS) == keys
