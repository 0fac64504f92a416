#!/usr/bin/env python3
"""Plots K1, the waiter curve, from a `make bench` report.

Reads the report's "at a glance" table of the process workloads (W7, K1, ...), keeps the K1 rows
(`K1 waiters <K> processes`) and draws three panels against K, the number of processes
contending for one lock: acquisitions per second of every implementation and of the floor
(BLPOP/LPUSH token); each redlease way of holding a Lock over the floor at the same K, with
issue 39's bar (0.8x); and the p99 and longest waits. Prints the curve as a Markdown table.

Needs matplotlib (pip install matplotlib). Usage:

    python3 bench/scripts/waiter_curve.py [--report target/bench-report.md] --out curve.png

Render the image for docs/ (docs/waiter-curve.png) only from a full run on a quiet machine:
a --quick report makes a valid plot, not a publishable one.
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

ROW = re.compile(r"^\|\s*K1 waiters (\d+) processes\s*\|")
UNITS = {"µs": 1e-3, "ms": 1.0, "s": 1e3}


def number(cell):
    """'4,751/s' -> 4751.0, '2.000' -> 2.0; None when empty."""
    cell = cell.strip().replace(",", "").replace("/s", "").replace("×", "")
    if not cell or cell == "—":
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def millis(cell):
    """'4.92 ms' -> 4.92, '845 µs' -> 0.845, '1.20 s' -> 1200; None when empty."""
    parts = cell.strip().split()
    if len(parts) != 2 or parts[1] not in UNITS:
        return None
    return float(parts[0].replace(",", "")) * UNITS[parts[1]]


def read_curve(path):
    """{implementation: {K: {metric: value}}} from the report's at-a-glance table."""
    curve = {}
    header = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("| Workload | Implementation | acquisitions/s"):
                header = [c.strip() for c in line.strip().strip("|").split("|")]
                continue
            m = ROW.match(line)
            if not m or header is None:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != len(header):
                continue
            row = dict(zip(header, cells))
            k = int(m.group(1))
            curve.setdefault(row["Implementation"], {})[k] = {
                "acq": number(row["acquisitions/s"]),
                "scripts": number(row["script calls / acq."]),
                "p99": millis(row["p99 wait"]),
                "longest": millis(row["longest wait"]),
                "jain": number(row["Jain"]),
                "floor_ratio": number(row["÷ floor"]),
            }
    return curve


def table(curve):
    ks = sorted({k for rows in curve.values() for k in rows})
    out = ["| Implementation | " + " | ".join(f"K = {k}: acq/s (÷ floor)" for k in ks) + " |"]
    out.append("|---|" + "---:|" * len(ks))
    for name, rows in curve.items():
        cells = []
        for k in ks:
            r = rows.get(k)
            if not r or r["acq"] is None:
                cells.append("")
                continue
            ratio = f" ({r['floor_ratio']:.2f}×)" if r["floor_ratio"] else ""
            cells.append(f"{r['acq']:,.0f}{ratio}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(curve, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acq, ratio, wait) = plt.subplots(1, 3, figsize=(15, 4.6))
    all_ks = sorted({k for rows in curve.values() for k in rows})
    for name, rows in curve.items():
        ks = sorted(k for k in rows if rows[k]["acq"] is not None)
        if not ks:
            continue
        style = "k--" if name.startswith("floor (") else ("k:" if name.startswith("floor") else "o-")
        acq.plot(ks, [rows[k]["acq"] for k in ks], style, label=name)
        rk = [k for k in ks if rows[k]["floor_ratio"]]
        if rk:
            ratio.plot(rk, [rows[k]["floor_ratio"] for k in rk], "o-", label=name)
        wk = [k for k in ks if rows[k]["p99"] is not None]
        if wk:
            line = wait.plot(wk, [rows[k]["p99"] for k in wk], style, label=f"{name} p99")[0]
            lk = [k for k in wk if rows[k]["longest"] is not None]
            wait.plot(lk, [rows[k]["longest"] for k in lk], ":", color=line.get_color())
    ratio.axhline(0.8, color="red", linewidth=0.8, label="bar: 0.8× floor")
    for ax, ylabel in (
        (acq, "acquisitions/s"),
        (ratio, "÷ floor (same K)"),
        (wait, "wait, ms (solid p99, dotted longest)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_ks, [str(k) for k in all_ks])
        ax.minorticks_off()
        ax.set_xlabel("processes contending (K)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    acq.set_ylim(bottom=0)
    ratio.set_ylim(0, 1.2)
    wait.set_yscale("log")
    acq.legend(fontsize=7)
    ratio.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default=os.path.join(ROOT, "target", "bench-report.md"))
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="K1: K processes × 1 task on one lock")
    args = ap.parse_args()
    curve = read_curve(args.report)
    if not curve:
        sys.exit(f"no K1 rows in {args.report} (run make bench with K1)")
    with open(args.report, encoding="utf-8") as f:
        first = f.readline().strip("# \n")
    print(table(curve))
    plot(curve, args.out, f"{args.title}: {first}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
