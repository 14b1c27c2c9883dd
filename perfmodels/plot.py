"""Predicted-vs-measured scatter plot (PNG) of a leave-one-architecture-out evaluation."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_predicted_vs_measured(predictions: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Log-log scatter of held-out predictions (ms) against measurements, coloured by family, with ±10 % bands.

    ``predictions`` is ``Evaluation.predictions`` (columns ``y``, ``predicted``, ``prior``, ``family``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 6), dpi=120)
    measured_ms = predictions["y"] * 1e3
    for family, group in predictions.groupby("family"):
        ax.scatter(group["y"] * 1e3, group["predicted"] * 1e3, s=18, label=str(family), alpha=0.8)
    ax.scatter(
        measured_ms, predictions["prior"] * 1e3, s=8, marker="x", color="grey", alpha=0.5, label="roofline prior"
    )
    low, high = float(measured_ms.min()) / 2, float(measured_ms.max()) * 2
    ax.plot([low, high], [low, high], color="black", linewidth=1)
    ax.fill_between(
        [low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1], color="green", alpha=0.12, label="±10 %"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_xlabel("measured time per query (ms)")
    ax.set_ylabel("predicted time per query (ms)")
    ax.set_title(title or "Leave-one-architecture-out: predicted vs measured")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
