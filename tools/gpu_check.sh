#!/usr/bin/env bash
# The whole GPU check, as one script for a lent NVIDIA machine (bare: its python3 has numpy,
# onnx, onnxruntime, cupy-cuda13x, torch, torchvision, pytest, hypothesis, not
# onnxruntime-extensions, which travels as a wheel in .whl/). From the repository root:
#
#     bash tools/gpu_check.sh [OUT_DIR]        (default: $OUT, else ./gpu_check_out)
#
# Steps, each time-limited so that the whole ends within ~8 minutes, each one's output teed
# into OUT_DIR/<step>.log:
#   env            the wheels of .whl/ installed (into /tmp/site), nvidia-smi -L, the CPU,
#                  numpy.show_runtime() (is AVX-512 dispatched?), the versions
#   exact_default  the exact-path CPU tests with NumPy's SIMD dispatch as it is
#   exact_lowered  the same with NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
#                  (frameworks' C library results vs NumPy's AVX-512 exp/log)
#   gpu_tests      tests/test_cupy.py: the CUDA source on the host and on the GPU (-m gpu)
#   bench          tools/gpu_bench.py over every workload -> gpu_bench.json, gpu_bench.md
# and summary.log: each step's exit status and seconds. The exit status is the first failing
# step's (0 if all passed). 8 files in all (what the device tool brings back).
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-$PWD/gpu_check_out}}"
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
SUMMARY="$OUT_DIR/summary.log"
: >"$SUMMARY"
STATUS=0
# the exact-path tests (the live parts skip without Paddle); EXACT_TESTS="..." to name others
# (CI's lists: .ci/exact-tests, .ci/npy-baseline)
EXACT="${EXACT_TESTS:-$(cat .ci/exact-tests)}"
LOWERED="$(cat .ci/npy-baseline)"

step() {  # step NAME SECONDS COMMAND...: run it time-limited, tee its output, record it
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    echo "== $name (limit ${limit}s): $*" | tee -a "$SUMMARY"
    set -o pipefail
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
    rc=$?
    set +o pipefail
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "!! $name: stopped at its ${limit}s limit" \
        | tee -a "$OUT_DIR/$name.log"
    echo "== $name: exit $rc in $((SECONDS - t0))s" | tee -a "$SUMMARY"
    [ "$STATUS" = 0 ] && [ "$rc" != 0 ] && STATUS=$rc
    return 0
}

env_info() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl \
            && echo "installed into /tmp/site: $(cd .whl && ls *.whl | tr '\n' ' ')" \
            || echo "!! pip could not install .whl/*.whl"
    else
        echo "no .whl/ folder: nothing installed"
    fi
    nvidia-smi -L
    grep -m1 "model name" /proc/cpuinfo
    echo "cores: $(nproc)"
    "$PY" - <<'EOF'
import numpy, onnx, onnxruntime, sys
print("python", sys.version.split()[0], sys.executable)
print("numpy", numpy.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__)
for name in ("onnxruntime_extensions", "cupy", "torch", "torchvision", "hypothesis", "pytest", "xdist"):
    try:
        m = __import__(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        print(name, "MISSING:", type(e).__name__, e)
numpy.show_runtime()
import ort_roi
print("ort_roi", ort_roi.__version__, ort_roi.__file__, "backend auto ->", ort_roi.set_backend("auto"))
EOF
    echo "NumPy's dispatch with NPY_DISABLE_CPU_FEATURES=\"$LOWERED\" (the exact_lowered step):"
    NPY_DISABLE_CPU_FEATURES="$LOWERED" "$PY" -c "import numpy; numpy.show_runtime()" 2>&1 \
        | grep -A2 simd_extensions
}

export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PY LOWERED
export -f env_info
step env 30 bash -c env_info
# pytest-xdist, where present, runs each test file in a worker of its own (their order kept)
XDIST=""
"$PY" -c "import xdist" 2>/dev/null && XDIST="-n 6 --dist loadfile"
# shellcheck disable=SC2086
step exact_default 100 "$PY" -m pytest -q -p no:cacheprovider -rfE $XDIST $EXACT
# shellcheck disable=SC2086
step exact_lowered 100 env NPY_DISABLE_CPU_FEATURES="$LOWERED" \
    "$PY" -m pytest -q -p no:cacheprovider -rfE $XDIST $EXACT
step gpu_tests 120 "$PY" -m pytest -q -p no:cacheprovider -rfE tests/test_cupy.py
step bench 130 "$PY" -m tools.gpu_bench --repeat 10 --out "$OUT_DIR/gpu_bench.json"
echo "== status $STATUS" | tee -a "$SUMMARY"
exit "$STATUS"
