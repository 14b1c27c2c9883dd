"""The fitted per-target weights as a table of rates (GFLOP/s, GB/s) and costs (µs per node or query)."""

from __future__ import annotations

from collections.abc import Sequence

from perfmodels.fit import FEATURES, GroupFit

#: How each fitted weight is shown: (header, unit scale, as a rate (1/w) or as a cost (w)).
DISPLAY = {
    "conv_flops": ("conv GF/s", 1e-9, True),
    "conv_dw_flops": ("dwconv GF/s", 1e-9, True),
    "gemm_flops": ("gemm GF/s", 1e-9, True),
    "gemv_flops": ("gemv GF/s", 1e-9, True),
    "norm_flops": ("norm GF/s", 1e-9, True),
    "other_flops": ("other GF/s", 1e-9, True),
    "activation_bytes": ("act GB/s", 1e-9, True),
    "gemv_weight_bytes_cached": ("wts GB/s", 1e-9, True),
    "gemv_weight_bytes_streamed": ("stream GB/s", 1e-9, True),
    "lrn_flops": ("lrn GF/s", 1e-9, True),
    "gemv_weight_bytes_hot": ("hot GB/s", 1e-9, True),
    "conv_nodes": ("us/convnode", 1e6, False),
    "other_nodes": ("us/node", 1e6, False),
    "queries": ("us/query", 1e6, False),
}


def describe_rates(groups: Sequence[GroupFit]) -> list[str]:
    """A table of each group's fitted weights as rates ("-" where the fit left a cost at zero)."""
    names = [DISPLAY.get(f, (f, 1.0, False))[0] for f in FEATURES]
    lines = [
        f"{'target':<30} {'route':<34} {'thr':>3} {'rows':>4} " + " ".join(f"{n:>11}" for n in names) + f" {'train':>6}"
    ]
    for g in groups:
        cells = []
        for feature, weight in zip(FEATURES, g.coef, strict=True):
            _, scale, as_rate = DISPLAY.get(feature, (feature, 1.0, False))
            if as_rate:
                cells.append(f"{scale / weight:11.1f}" if weight > 0 else f"{'-':>11}")
            else:
                cells.append(f"{weight * scale:11.2f}")
        lines.append(
            f"{g.target[:30]:<30} {g.route.describe()[:34]:<34} {g.threads:>3} {g.rows:>4} "
            + " ".join(cells)
            + f" {g.train_rmspe:6.1%}"
        )
    return lines
