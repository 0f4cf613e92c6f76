"""Curves from a benchmark's own samples, as PNG files (matplotlib lives here and only here among the
benchmarks; it draws off-screen, without a display)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


@dataclass
class Panel:
    """One plot of a figure: curves over a shared x axis, each (label, xs, ys), with vertical marks."""

    title: str
    unit: str
    curves: list[tuple[str, Sequence[float], Sequence[float]]] = field(default_factory=list)
    log: bool = False  # a logarithmic y axis (values spanning several orders of magnitude)


def draw(path: Path, title: str, x_label: str, panels: Sequence[Panel],
         marks: Sequence[tuple[float, str]] = (), *, x_log: bool = False) -> Path:
    """Panels stacked in one PNG at `path`, each with the `marks` (x, label) drawn as dotted lines (the
    moments something was done to the run: a restart, a change); `x_log`: a logarithmic x axis (sizes
    growing tenfold)."""
    import matplotlib as mpl

    mpl.use("Agg")  # off-screen: no display on a server or in CI
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 2.4 * len(panels)), sharex=True, squeeze=False)
    figure.suptitle(title)
    for axis, panel in zip(axes[:, 0], panels, strict=True):
        for label, xs, ys in panel.curves:
            axis.plot(xs, ys, label=label, linewidth=1.2, marker="o" if x_log else None)
        if x_log:
            axis.set_xscale("log")
        for x, _ in marks:
            axis.axvline(x, color="grey", linestyle=":", linewidth=0.8)
        axis.set_title(panel.title, fontsize=9, loc="left")
        axis.set_ylabel(panel.unit)
        if panel.log:
            axis.set_yscale("log")
        else:
            axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        if len(panel.curves) > 1:
            axis.legend(fontsize=8, loc="upper left")
    top = axes[0, 0]
    for x, label in marks:
        top.annotate(label, (x, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                     va="top", ha="right", color="grey")
    axes[-1, 0].set_xlabel(x_label)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
