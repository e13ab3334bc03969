"""ort_roi.reuse_freed_memory: large arrays freed and made again land on pages already mapped
(counted as minor page faults, in a child process: the setting is the process's)."""

import subprocess
import sys

import pytest

CHILD = r"""
import resource, sys
import numpy as np
import ort_roi
took = ort_roi.reuse_freed_memory() if sys.argv[1] == "reuse" else None
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.empty(64 << 18, np.float32)  # 64 MiB, as the bridge copies a large map
    a.fill(1.0)
    del a
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(took, faults[-1])
"""


def _last_round_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_a_freed_large_array_is_made_again_on_mapped_pages():
    took, reused = _last_round_faults("reuse")
    assert took == "True"
    _, fresh = _last_round_faults("default")
    # 64 MiB is 16384 pages (32 transparent huge pages): fresh ones fault every time
    assert fresh >= 32, fresh
    assert reused <= 4, reused
