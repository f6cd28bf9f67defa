"""Rewrite the EXPECTED table of tests/real_traces_expected.py for the traces in traces/ (run after
replacing the committed traces, then `ruff format` it and review the diff): the values the queries
give today.

    python -m tests.pin_real_traces
"""

from __future__ import annotations

import pprint
from pathlib import Path

from bubblelab.profiling import analysis, overview
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest

# the table's own columns and traces
from tests.test_profiling_real_traces import MEDIAN_COLUMNS, TRACES


def expected(con, run: str) -> dict:
    steps = analysis.per_step(con, run)
    steady = analysis.steady_state(steps)
    first, last = int(steady.step.min()), int(steady.step.max())
    left_out = sorted(set(range(first, last + 1)) - set(steady.step.tolist()))
    pinned = int(steady.step.iloc[len(steady) // 2])
    row = steps.set_index("step").loc[pinned]
    table = analysis.attribution(con, run, steady)
    began = table[table.began_ms > 0]
    by_time = analysis.rollup(table).time_ms
    syncs = analysis.sync_inventory(con, run).groupby(["event", "detail", "phase"]).size()
    hist = analysis.idle_histogram(con, run, steady)
    kernels = analysis.kernel_summary(con, run).head(3)
    r6 = lambda x: round(float(x), 6)  # noqa: E731
    return dict(
        run_id=run,
        steps=(len(steps), int(steps.step.min()), int(steps.step.max())),
        steady=(first, last, left_out),
        medians={c: r6(steady[c].median()) for c in MEDIAN_COLUMNS},
        row=(pinned, {c: round(row[c] * 1e6) for c in MEDIAN_COLUMNS}),
        began={p: r6(b) for p, b in zip(began.phase, began.began_ms, strict=True)},
        by_time={p: r6(b) for p, b in by_time[by_time > 0].to_dict().items()},
        syncs={" ".join(k): int(n) for k, n in syncs.items()},
        hist=[
            tuple(int(v) for v in r)
            for r in hist[hist.gaps > 0][["lo_us", "gaps", "kernel_gaps"]].values.tolist()
        ],
        kernels=[(r.name, r.phase, int(r.calls), r6(r.total_ms)) for r in kernels.itertuples()],
        host_late_share=r6(overview.analyze(con, [run])["groups"][0]["host_late_share"]),
    )


def main() -> None:
    con = connect(None)
    table = "EXPECTED = {\n"
    for path in sorted(TRACES.glob("*.sqlite.gz")):
        values = pprint.pformat(
            expected(con, ingest(path, None, {}, con=con)), width=110, sort_dicts=False
        )
        table += f"    {path.name!r}: " + "\n    ".join(values.splitlines()) + ",\n"
    module = Path(__file__).parent / "real_traces_expected.py"
    text = module.read_text()
    module.write_text(text[: text.index("EXPECTED = {\n")] + table + "}\n")


if __name__ == "__main__":
    main()
