"""The PNG: per mode, both libraries' times per case on a log axis, with the floor marked.

matplotlib is an optional extra (`pip install kdagen[plot]`); without it the run says so and
writes the JSON and markdown only.
"""
from __future__ import annotations

import importlib

from .libraries import NAMES, TITLES


def unavailable() -> str | None:
    """Why no PNG can be written, or None."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as e:
        return f"matplotlib is not installed ({e}); pip install 'kdagen[plot]' for the PNG"
    return None


def write_png(result: dict, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(c["mode"] for c in result["cases"]))
    per_mode = max(1, max(sum(c["mode"] == m for c in result["cases"]) for m in modes) if modes else 1)
    fig, axes = plt.subplots(max(1, len(modes)), 1, figsize=(max(8.0, 0.9 * per_mode + 2), 4.0 * max(1, len(modes))),
                             squeeze=False)
    width = 0.8 / len(NAMES)
    for ax, mode in zip(axes[:, 0], modes):
        cases = [c for c in result["cases"] if c["mode"] == mode]
        xs = range(len(cases))
        for j, name in enumerate(NAMES):
            ms = [c["results"][name]["ms"] if c["results"][name]["status"] == "ok" else float("nan") for c in cases]
            ax.bar([x + (j - (len(NAMES) - 1) / 2) * width for x in xs], ms, width, label=TITLES[name])
        ax.scatter(list(xs), [c["work"]["floor_ms"] for c in cases], marker="_", s=500, color="black",
                   zorder=3, label="floor (model)")
        ax.set_yscale("log")
        ax.set_ylabel("ms (median)")
        ax.set_title(f"{mode} — {result['env']['device']}")
        ax.set_xticks(list(xs), [f"{c['op']}\n{c['shape_name']}" for c in cases], fontsize=7, rotation=20,
                      ha="right")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
