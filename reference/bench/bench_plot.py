"""The benchmark report's plot (plot.png): cost per call against the chain's
length and the tensor's size, per variant.
"""

from __future__ import annotations

from pathlib import Path

from .bench_rows import CPP_TARGET, VARIANTS, find, fmt_ns


def plot(calls: list[dict], control: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9), constrained_layout=True)
    chains = sorted({r["chain"] for r in calls if r["variant"] not in ("stock", "dormant")})
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    for i, lang in enumerate(("cpp", "python")):
        for j, op in enumerate(("mul", "add")):
            ax = axes[i][j]
            variants = [v for v in VARIANTS[1:] if find(calls, lang=lang, op=op, variant=v,
                                                        numel=2, chain=chains[0])]
            width = 0.8 / max(1, len(chains))
            for k, c in enumerate(chains):
                xs, ys, lo, hi = [], [], [], []
                for x, v in enumerate(variants):
                    r = find(calls, lang=lang, op=op, variant=v, numel=2, chain=c)
                    s = find(calls, lang=lang, op=op, variant="stock", numel=2, chain=0)
                    if not r or not s:
                        continue
                    xs.append(x + (k - (len(chains) - 1) / 2) * width)
                    ys.append(r["ratio"])
                    lo.append(max(0.0, r["ratio"] - r["p25_ns"] / s["median_ns"]))
                    hi.append(max(0.0, r["p75_ns"] / s["median_ns"] - r["ratio"]))
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=f"chain {c}",
                       color=colors[k % len(colors)])
            ax.axhline(1.0, color="black", linewidth=0.8)
            if lang == "cpp" and op == "mul":
                ax.axhline(CPP_TARGET, color="red", linestyle="--", linewidth=0.8,
                           label="target 1.05")
            ax.set_xticks(range(len(variants)))
            ax.set_xticklabels([v.replace("_", "\n", 1) for v in variants], fontsize=8)
            stock = find(calls, lang=lang, op=op, variant="stock", numel=2, chain=0)
            ax.set_title(f"{'C++' if lang == 'cpp' else 'Python'}: aten::{op}.Tensor, 2 floats "
                         f"(stock {fmt_ns(stock['median_ns']) if stock else '?'})")
            ax.set_ylabel("median / stock median (bars: p25–p75)")
            ax.legend(fontsize=8)

    ax = axes[0][2]
    for c in control:
        ns = [1, 10, 100]
        ys = [(c[f"disable_{n}_s"] + c[f"reenable_{n}_s"]) * 1e6 for n in ("1op", "10ops", "100ops")]
        ax.plot(ns, ys, marker="o", label=f"{c['overrides']:,} overrides / {c['ops']:,} ops")
    if control:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ops the dsl touches")
        ax.set_ylabel("disable + re-enable (µs)")
        ax.set_title("Control plane: toggling one dsl (C++)")
        ax.legend(fontsize=8)

    ax = axes[1][2]
    for lang, style in (("cpp", "-"), ("python", "--")):
        for v in ("decline_cpp", "decline_py", "upstream_decline_py"):
            pts = sorted((r["numel"], r["added_ns"]) for r in calls
                         if r["lang"] == lang and r["op"] == "mul" and r["variant"] == v
                         and r["chain"] == 1 and "added_ns" in r)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                        label=f"{'C++' if lang == 'cpp' else 'Python'} {v}")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=100)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("elements")
    ax.set_ylabel("median - stock median (ns)")
    ax.set_title("Added time per call, mul, chain of 1")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
