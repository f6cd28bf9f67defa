"""A chain of kernels run in several PDL modes (engine/pdl.py), each eagerly and as a replayed CUDA
graph: the GPU tests of test_pdl.py and test_fused_gemv.py check that PDL never changes a bit."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def outputs_in_every_mode(
    chain: Callable[[], torch.Tensor], modes: Iterable[str]
) -> dict[str, torch.Tensor]:
    """Each mode's output of `chain`, after asserting that its eager run and three replays of its
    captured graph agree bit for bit."""
    from bubblelab.engine import pdl

    outputs = {}
    for mode in modes:
        with pdl.using(mode):
            eager = chain()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = chain()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(eager, out), mode
            outputs[mode] = out.clone()
    return outputs
