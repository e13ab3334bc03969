"""The test command's last section: how many tests skipped for each reason (the reasons name
the extra that brings what is missing), so a run without the extras says what it left out.
``python -m pytest -q -rs`` lists every skipped test with its reason."""

from __future__ import annotations

import collections


def reason(report) -> str:
    """A skipped test report's reason, without pytest's "Skipped: " prefix."""
    r = report.longrepr
    text = r[2] if isinstance(r, tuple) else str(r)
    return text.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    if not skipped:
        return
    counts = collections.Counter(reason(r) for r in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason (-rs lists each test)")
    for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.line(f"{n:6d}  {why}")
