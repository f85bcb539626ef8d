"""Markdown table of one or more `tritred bench --json` reports (cases concatenated in order).

Usage: python tools/perf_table.py report.json [more.json ...]   (prints the summary and the table)
"""

from __future__ import annotations

import json
import math
import sys


def main(paths: list[str]) -> None:
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
        row.append(f"{cfg.get('strategy', '')} M{cfg.get('BLOCK_M')} N{cfg.get('BLOCK_N')} K{cfg.get('BLOCK_K')} "
                   f"w{cfg.get('num_warps')} s{cfg.get('split')}")
        print("| " + " | ".join(row) + " |")
        if t["status"] == "ok":
            pcts.append(t["pct_copy"])
        if ratio:
            ratios.append(ratio)
            if ratio < 1:
                below.append(c["label"])
    pcts.sort()
    print()
    print(f"cases {len(cases)}; median {pcts[len(pcts) // 2]:.0f} % of copy bandwidth (min {pcts[0]:.0f} %); "
          f"geometric mean vs best peer {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x; "
          f"slower than the best peer on {len(below)}")


if __name__ == "__main__":
    main(sys.argv[1:])
