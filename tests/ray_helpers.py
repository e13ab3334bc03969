"""What the Ray tests share (tests/test_ray.py on a local cluster, tests/test_ray_local.py
without one): the model, its rows good and bad, the bodies of HTTP requests and how an
answer is held to the model run in this process."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import onnx

from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import Runner

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "models" / "fast_rcnn_head.onnx")  # features [1,16,24,32], rois [R,5]


def good_feed(i: int) -> dict[str, np.ndarray]:
    """Row i: one image's features and 1-6 boxes (a varying number of boxes per row)."""
    return generate_inputs(onnx.load(MODEL), r=1 + i % 6, seed=i)


def bad_feed(i: int) -> tuple[dict[str, np.ndarray], str]:
    """A bad variant of row i and what is wrong with it."""
    feed = good_feed(i)
    kind = ("nan box", "wrong shape", "nan image")[i % 3]
    if kind == "nan box":
        feed["rois"][0, 3] = np.nan
    elif kind == "wrong shape":
        feed["rois"] = feed["rois"][:, 1:]
    else:
        feed["features"][0, 2, 5, 7] = np.nan
    return feed, kind


BAD = {3, 7, 8}  # ids of bad rows: a NaN box, a wrong shape, a NaN image; good rows follow


def feed_rows(n: int = 12) -> list[dict]:
    return [dict(id=i, **(bad_feed(i)[0] if i in BAD else good_feed(i))) for i in range(n)]


def expected_of(rows: list[dict], cast: bool = False) -> dict[int, dict | str]:
    """id -> outputs, or the RoiOpError message, of the model run in this process."""
    runner, out = Runner(MODEL), {}
    for row in rows:
        try:
            out[row["id"]] = runner.run(row, cast=cast)
        except Exception as e:  # noqa: BLE001 - RoiOpError; checked below
            out[row["id"]] = str(e)
    return out


def json_body(feed: dict) -> bytes:
    return json.dumps({k: np.asarray(v).tolist() if not isinstance(v, (dict, list)) else v
                       for k, v in feed.items()}).encode()


def assert_exact(text: str, want: dict[str, np.ndarray]) -> None:
    got = json.loads(text)
    assert set(got) == set(want)
    for k, v in got.items():
        np.testing.assert_array_equal(np.array(v, np.float32).reshape(want[k].shape), want[k])


def hostile_bodies() -> dict[str, tuple[bytes, str]]:
    """name -> (body, what its 400 says): every kind of malformed body."""
    feats = json.dumps(good_feed(0)["features"].tolist())
    box = "[0, 16, 16, 200, 180]"

    def with_rois(rois: str) -> bytes:
        return f'{{"features": {feats}, "rois": {rois}}}'.encode()

    return {
        "deep nesting": (b"[" * 100000, "nests deeper than the cap max_depth=32"),
        "deep in a value": (b'{"rois": ' + b"[" * 100000 + b"]" * 100000 + b"}",
                            "max_depth=32"),
        "over-size": (b"[" + b"0, " * (6 << 20) + b"0]", "over the cap max_body_bytes"),
        "a million lists": (b'{"features": [' + b"[], " * 100000 + b"[]]}",
                            "holds 100002 arrays; the model's inputs hold at most"),
        "a million numbers": (b'{"features": [' + b"1.5," * 200000 + b"1]}",
                              "holds 200001 values; the model's inputs hold at most"),
        "strings": (with_rois('[["0", 16, 16, 200, 180]]'),
                    "'rois' is not numeric (got strings)"),
        "a long string": (b'{"features": "' + b"a" * (600 << 10) + b'"}',
                          "the JSON string at byte 13 holds at least 614400 bytes, over the "
                          "cap max_string_bytes=1024"),
        "a long key": (b'{"' + b"\\\"" * 600 + b'": 1}',  # escaped quotes
                       "the JSON string at byte 1 holds at least 1025 bytes, over the cap "
                       "max_string_bytes=1024"),
        "many strings": (b'{"features": [' + b'"", ' * 1100 + b'""]}',
                         "the JSON holds 2204 quote characters, over the 1024 strings"),
        "unterminated": (b'{"features": "' + b"b" * 2000, "holds 2000 bytes (unterminated)"),
        "NaN": (with_rois("[[0, 16, 16, NaN, 180]]"), "'NaN' at byte"),
        "Infinity": (with_rois("[[0, 16, -Infinity, 200, 180]]"), "'Infinity' at byte"),
        "boolean": (with_rois("[[0, true, 16, 200, 180]]"), "'true' at byte"),
        "null": (with_rois("null"), "'null' at byte"),
        "missing": (f'{{"features": {feats}}}'.encode(), "graph input 'rois' is missing"),
        "duplicate keys": (f'{{"features": {feats}, "rois": [{box}], "rois": [{box}]}}'
                           .encode(), "the key 'rois' appears twice"),
        "empty": (b"", "the body is empty"),
        "not JSON": (b"features=1&rois=2", "is not a number"),
        "cut short": (b'{"features": [1', "not JSON"),
        "not UTF-8": (b'{"f\xe9": 1}', "not UTF-8"),
        "not an object": (b"[1, 2]", "must be a JSON object"),
        "unknown input": (b'{"boxes": [[1, 2, 3, 4]]}', "unknown graph inputs ['boxes']"),
        "beyond float32": (with_rois("[[0, 16, 16, 1e39, 180]]"), "beyond float32's range"),
        "shape and data disagree": (with_rois('{"shape": [2, 5], "data": [1]}'),
                                    "shape [2, 5] holds 10 values, data has 1"),
        "ragged": (with_rois(f"[{box}, [0, 1]]"), "'rois' is not an array"),
    }
