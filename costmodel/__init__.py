"""The cost model of the GPU bubble (after Moondream's Photon post).

Modules: model (the formulas), schedule (the loop's steps replayed from the requests), costs (a
run's measured step costs), wholerun (the whole-run model), observed (speedups over repeat pairs),
predict (the prediction table), perturbation (what the profiler did), compare (runs side by side),
bootstrap, simulate (a loop model for tests and demos), blog (the post's numbers), roofline (the
least time a whole run could take). Nothing is imported here, so `bubblelab.runs.rundir` stays
cheap.
"""
