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


def test_the_h200s_idle_draw_is_the_committed_measurement_refitted():
    """docs/measurements/2026-12-02/power-check-2-h200/idle-power.json (one H200): every fit in it
    comes back from its own settings (those that held the top clock), their intercepts lie within
    15 W of each other over three kernels and two cycle lengths, and IDLE_W takes their median."""
    import json
    from pathlib import Path

    from bubblelab.costmodel.power import IDLE_W

    path = Path(__file__).parents[1] / "docs/measurements/2026-12-02/power-check-2-h200"
    record = json.loads((path / "idle-power.json").read_text())
    top = record["top_sm_clock_mhz"]
    for name, fit in record["fits"].items():
        kernel, period = name.removesuffix("ms").split("@")
        held = [
            s
            for s in record["settings"]
            if s["kernel"] == kernel
            and s["sm_clock_mhz"] >= 0.99 * top
            and (s["period_ms"] == float(period) or s["duty_asked"] == 1.0)
        ]
        again = fit_idle([s["busy_share"] for s in held], [s["power_w"] for s in held])
        assert again == pytest.approx(fit)
    low, high = record["idle_w_range"]
    assert high - low < 15 and IDLE_W[record["gpu"]] == round(record["idle_w"])
