"""``appopt catalog``: the catalog as readable tables."""

from __future__ import annotations

from optimiser.catalog import load_catalog
from optimiser.errors import AppoptError
from optimiser.suggest import unknown_id_message

CATEGORIES = ("frameworks", "compilers", "libraries", "hardware", "architectures")


def list_category(category: str) -> str:
    if category not in CATEGORIES:
        raise AppoptError(unknown_id_message("category", category, CATEGORIES), exit_code=2)
    cat = load_catalog()
    rows: list[tuple[str, ...]]
    if category == "hardware":
        rows = [("id", "name", "kind", "arch", "fp32 TFLOP/s", "fp16 TFLOP/s", "GB/s")]
        for h in cat.hardware.values():
            fp16 = h.peak_flops.get("fp16")
            rows.append((
                h.id, h.name, h.kind, h.arch or "-", f"{h.peak_flops['fp32'] / 1e12:.1f}",
                f"{fp16 / 1e12:.1f}" if fp16 else "-", f"{h.mem_bandwidth / 1e9:.0f}",
            ))
    elif category == "architectures":
        rows = [("id", "name", "task", "GMACs", "params (M)")]
        rows += [(a.id, a.name, a.task, f"{a.gmacs:.2f}", f"{a.params_m:.1f}") for a in cat.architectures.values()]
    else:
        entries = getattr(cat, category)
        rows = [("id", "name", "version", "status", "modes", "cpu", "accelerators")]
        for e in entries.values():
            status = e.status.value + (f" -> {e.successor}" if e.successor else "")
            rows.append((
                e.id, e.name, e.version, status, "/".join(e.modes), ",".join(e.cpu_archs) or "-",
                ",".join(e.accelerators) or "-",
            ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
