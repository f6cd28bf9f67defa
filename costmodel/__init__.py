"""The cost model of the GPU bubble (after Moondream's Photon post) and the HTML report of a run
directory.

Modules: model (the formulas), predict (the prediction table), wholerun (wall-clock model),
bootstrap, results (DIR/results.json), compare (runs side by side), report + figures + templates/
(the HTML page), traces (the committed nsys traces, for the notebooks), simulate (a loop model for
tests and demos), blog (the post's numbers), roofline (the least time a whole run could take).
Nothing is imported here, so `bubblelab.runs.rundir` stays cheap.
"""
