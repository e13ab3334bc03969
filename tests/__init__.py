"""ort_roi's tests, a package: pytest puts the repository root on ``sys.path`` (the first
folder above without an ``__init__.py``), so tests and tools import the shared helpers as
``from tests import cases as C`` and the tools as ``from tools import make_tf_graphs``; nothing
here touches ``sys.path`` (tests/test_architecture.py holds to it)."""
