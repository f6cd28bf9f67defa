"""The report's figures, each a function of frames returning an inline SVG string.

`lanes` (host phases against device work), `series` (every step of a run over time), `steps`
(idle gaps, bubble attribution, the period),
`model` (the cost model's figures) and `style` (the look, applied per figure: importing these
leaves matplotlib's backend and rcParams alone).
"""

from .lanes import lane_chart
from .model import predicted_vs_observed, whatif_curves
from .series import step_series
from .steps import attribution_bars, gap_histogram, period_breakdown

__all__ = [
    "attribution_bars",
    "gap_histogram",
    "lane_chart",
    "period_breakdown",
    "predicted_vs_observed",
    "step_series",
    "whatif_curves",
]
