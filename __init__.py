"""bubblelab: how much GPU time an LLM engine loses to its own CPU bookkeeping, and how much
pipelined decoding wins back.

The checkout is the package: each folder at its top installs as bubblelab.<folder>, so a relative
import reads the same on disk and installed. The layers, each importing only those below it:
core <- engine, profiling, costmodel (siblings) <- runs <- report <- cli (docs/architecture.md).
"""
