"""How ``ort-roi bench`` reports its results: the ratio's explanation (``RATIO``), times as
text (``ms``), the markdown table (``markdown``) and the speed-up bar chart (``speedups``,
``plot``; matplotlib, the 'plot' extra)."""

from __future__ import annotations

import numpy as np

from .bench_timing import describe

RATIO = ("ratio = peer time / ort_roi time (> 1: ort_roi is faster); each time the median of "
         "{repeat} rounds after a warm-up, ort_roi and its peers timed back to back in every "
         "round, in this one process (OpenMP threads of the peers passive: OMP_WAIT_POLICY="
         "PASSIVE unless set); 'a-b' the least and largest ratio of one round")


def ms(seconds: float) -> str:
    """Seconds as the bench prints them: in ms from 1 ms, in us below."""
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def markdown(results: dict) -> str:
    """A table of the results: our time and, per peer, its time and peer/ours."""
    lines = ["| workload | op | ort_roi | bridge alone | peer | peer time | peer / ort_roi "
             "| per round | max abs diff |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        for i, (p, v) in enumerate(r["peers"].items() or [("-", None)]):
            floor = r.get("bridge_floor_s")
            head = (f"| {r['workload']} | {r['op']} | {ms(r['ort_roi_s'])} | "
                    f"{ms(floor) if floor is not None else '-'}" if i == 0 else "| | | |")
            if v is None:
                lines.append(head + " | - | - | - | - | - |")
            else:
                lo, _, hi = v["round_ratios"]
                lines.append(f"{head} | {p} | {ms(v['s'])} | {v['ratio']:.2f}x | "
                             f"{lo:.2f}-{hi:.2f}x | {_diff(v['max_abs_diff'])} |")
    return "\n".join(lines)


def _short(workload: str) -> str:
    """W1_faster_rcnn_c4 -> W1; the scaling rows keep their R (W2_R100), the per-level rows
    their row (W8 box P2 (912))."""
    name, _, row = workload.partition(" ")
    head, _, rest = name.partition("_")
    short = name if rest[:1] == "R" and rest[1:].isdigit() else head
    return f"{short} {row}" if row else short


def _diff(d: float) -> str:
    """A max abs difference for the table; '-' where the outputs are not comparable (the
    'level 0 only' rows pool other maps)."""
    return "-" if np.isnan(d) else f"{d:.1e}"


#: How the plot and tables name the ops: labels that differ by more than case.
OP_LABELS = {"RoIAlign": "RoIAlign (Paddle's)", "RoiAlign": "ONNX RoiAlign, converted",
             "ROIPooling.max": "ROIPooling max", "ROIPooling.bilinear": "ROIPooling bilinear"}


def speedups(results: dict) -> list[tuple[str, str, float]]:
    """(row label, peer, peer time / ort_roi time) for every peer of every row."""
    out = []
    for r in results["rows"]:
        label = f"{_short(r['workload'])} {OP_LABELS.get(r['op'], r['op'])}"
        for p, v in sorted(r["peers"].items()):
            out.append((label, p, v["ratio"]))
    return out


def plot(results: dict, path: str) -> None:
    """A PNG bar chart of the speed-ups: peer time / ort_roi time per row and peer (log
    scale, 1 = level; above the line ort_roi is faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = speedups(results)
    rows = list(dict.fromkeys(label for label, _, _ in data))
    peers = sorted({p for _, p, _ in data})
    cmap = plt.get_cmap("tab20")  # a colour per peer (the full bench has more than 10)
    colors = {p: cmap(i % cmap.N) for i, p in enumerate(peers)}
    per_row = {row: [(p, x) for label, p, x in data if label == row] for row in rows}
    width = 0.8 / max(len(v) for v in per_row.values())
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 6.5))
    for i, row in enumerate(rows):
        bars = per_row[row]
        x0 = i - width * (len(bars) - 1) / 2
        for j, (p, x) in enumerate(bars):
            ax.bar(x0 + j * width, x, width, color=colors[p])
            ax.text(x0 + j * width, x, f"{x:.1f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log", base=2)
    ax.set_xticks(np.arange(len(rows)), rows, fontsize=7, rotation=40, ha="right")
    ax.set_ylabel("speed-up: peer time / ort_roi time")
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in peers], peers,
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"ort_roi against its peers (above 1: ort_roi faster)\n"
                 f"{describe(results) if 'cpu' in results else ''}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
