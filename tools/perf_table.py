"""Markdown table of one or more `tritred bench --json` reports (cases concatenated in order).

Usage: python tools/perf_table.py report.json [more.json ...] [--plot out.png]
(prints the table and a summary; --plot draws tritred's and each peer's % of copy bandwidth per case)
"""

from __future__ import annotations

import json
import math
import sys


def plot(cases: list[dict], providers: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(12, len(cases) * 0.22), 6))
    xs = range(len(cases))
    for name, marker in zip(["tritred", *providers], "o^sdv"):
        ys = [c["providers"].get(name, {}).get("pct_copy") if c["providers"].get(name, {}).get("status") == "ok"
              else None for c in cases]
        ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker, label=name,
                markersize=6 if name == "tritred" else 4, alpha=1 if name == "tritred" else 0.6)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([c["label"] for c in cases], rotation=90, fontsize=6)
    ax.set_ylabel("% of measured copy bandwidth")
    ax.axhline(90, color="gray", lw=0.5, ls="--")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(paths: list[str]) -> None:
    plot_to = None
    if "--plot" in paths:
        i = paths.index("--plot")
        plot_to, paths = paths[i + 1], paths[:i] + paths[i + 2:]
    cases, metas = [], []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        metas.append(d["meta"])
        cases += d["cases"]
    providers = [p for p in metas[0]["providers"] if p != "tritred"]
    head = ["case", "MB", "tritred"] + providers + ["best peer", "tritred / best peer", "tritred config"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    pcts, ratios, below = [], [], []
    for c in cases:
        prov = c["providers"]
        t = prov["tritred"]
        row = [c["label"], f"{c['bytes'] / 1e6:.0f}", f"{t['pct_copy']:.0f}" if t["status"] == "ok" else t["status"]]
        best = None
        for p in providers:
            m = prov.get(p)
            if m and m["status"] == "ok":
                row.append(f"{m['pct_copy']:.0f}")
                if best is None or m["ms"] < best[1]:
                    best = (p, m["ms"])
            else:
                row.append("-")
        ratio = best[1] / t["ms"] if best and t["status"] == "ok" else None
        row += [best[0] if best else "-", f"{ratio:.2f}x" if ratio else "-"]
        cfg = c.get("tritred_config") or {}
        tail = f"+{cfg['BLOCK_TAIL']}" if cfg.get("BLOCK_TAIL") else ""
        rt = f" t{cfg['threads_per_row']}" if cfg.get("threads_per_row") else ""  # (threads per row)
        row.append(f"{cfg.get('strategy', '')} M{cfg.get('BLOCK_M')} N{cfg.get('BLOCK_N')}{tail} K{cfg.get('BLOCK_K')} "
                   f"w{cfg.get('num_warps')} s{cfg.get('split')}{rt}")
        print("| " + " | ".join(row) + " |")
        if t["status"] == "ok":
            pcts.append(t["pct_copy"])
        if ratio:
            ratios.append(ratio)
            if ratio < 1:
                below.append(c["label"])
    if plot_to:
        plot(cases, providers, plot_to)
    pcts.sort()
    print()
    print(f"cases {len(cases)}; median {pcts[len(pcts) // 2]:.0f} % of copy bandwidth (min {pcts[0]:.0f} %); "
          f"geometric mean vs best peer {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x; "
          f"slower than the best peer on {len(below)}")


if __name__ == "__main__":
    main(sys.argv[1:])
