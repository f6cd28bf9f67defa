"""costmodel.power.fit_idle (benchmarks.idle_power's fit): power against busy share, a line whose
intercept is the idle draw."""

import pytest

from bubblelab.costmodel.power import fit_idle


def test_the_intercept_is_the_idle_draw_and_the_line_at_one_the_busy_draw():
    busy = [0.35, 0.55, 0.75, 0.95, 1.0]
    watts = [180 + b * (520 - 180) for b in busy]
    watts[2] += 4.0  # sampling noise
    fit = fit_idle(busy, watts)
    assert fit["idle_w"] == pytest.approx(180, abs=3)
    assert fit["kept_busy_w"] == pytest.approx(520, abs=3)
    assert 2.0 < fit["max_residual_w"] < 4.0


def test_too_few_or_too_close_duties_are_refused():
    with pytest.raises(ValueError, match="3 or more duties"):
        fit_idle([0.5, 0.9], [300, 400])
    with pytest.raises(ValueError, match="spanning 0.2"):
        fit_idle([0.8, 0.85, 0.9], [400, 410, 420])
