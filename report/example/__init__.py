"""A small run directory that ships with the package, so the notebooks and a first `bubblelab
report` work from a plain install: the four committed H200 traces (qwen3-0.6b, 1 and 32 streams,
depth 1 and 2) collected into one results.json.gz (about 200 KB).

Rebuilt from a checkout with:

    r = bubblelab.runs.traces.load_traces()
    r.provenance = {"example": ...}   # the traces' own paths name the machine that built it
    bubblelab.runs.rundir.write_results(DIR, r.runs, r.steps, r.attribution, r.gaps,
                                        r.provenance, r.timeline, r.requests)
    then gzip DIR/results.json into this folder.
"""

from pathlib import Path

RUN_DIR = Path(__file__).resolve().parent  # open_source(RUN_DIR) reads results.json.gz here
