"""Any sequence of engine API calls (issue #28), valid and invalid, with aborts and exceptions in
between, leaves the engine usable: after it drains, nothing is queued or in flight, every KV page
and reference is back (check_idle: real checks, not `assert`), and it serves a batch exactly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from bubblelab.core.errors import RequestError
from bubblelab.core.sequence import SequenceStatus
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import make_engine
from tests.test_engine_recovery import Boom, assert_clean, assert_serves, wrap

PROMPT = st.lists(st.integers(1, 200), min_size=1, max_size=8)
BAD_PROMPTS = [None, 5, b"ab", [], [-1], [1.5], "\udcff", iter([1, 2])]


def machine(llm, loaded) -> type[RuleBasedStateMachine]:
    engine = llm.engine

    def unfinished() -> list[str]:
        return sorted(r for r, s in engine.seqs.items() if s.status is not SequenceStatus.FINISHED)

    class EngineCalls(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def new_id(self) -> str:
            self.n += 1
            return f"s{self.n}"

        @rule(prompt=PROMPT, max_tokens=st.integers(1, 8))
        def add(self, prompt, max_tokens):
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            engine.add_request(self.new_id(), prompt, params)

        @rule(prompt=st.sampled_from(BAD_PROMPTS))
        def add_bad(self, prompt):
            with pytest.raises(RequestError):
                engine.add_request(self.new_id(), prompt, SamplingParams(max_tokens=4))

        @rule()
        def add_running_id_again(self):
            if running := unfinished():
                with pytest.raises(RequestError, match="already running"):
                    engine.add_request(running[0], [1, 2], SamplingParams())

        @rule(pick=st.integers(0, 63))
        def abort(self, pick):
            if running := unfinished():  # what is drawn never depends on the engine (replays)
                engine.abort(running[pick % len(running)])

        @rule(steps=st.integers(1, 4))
        def step(self, steps):
            for _ in range(steps):
                if engine.has_unfinished():
                    engine.step()

        @rule(after=st.integers(1, 4), error=st.sampled_from([Boom, KeyboardInterrupt]))
        def generate_raising(self, after, error):
            calls = []

            def on_step():
                calls.append(1)
                if len(calls) == after:
                    raise error

            others = set(engine.seqs)
            with pytest.raises(error):
                llm.generate([[3, 4], [5]], SamplingParams(max_tokens=20, ignore_eos=True),
                             on_step=on_step)  # fmt: skip
            assert set(engine.seqs) <= others  # its own requests are gone, others may remain

        @invariant()
        def pages_are_counted(self):
            assert 0 <= engine.blocks.num_free <= engine.blocks.num_blocks

        def teardown(self):
            while engine.has_unfinished():
                engine.step()
            engine.cancel(list(engine.seqs))  # forget the finished: their outputs were read
            assert_clean(llm)
            assert_serves(llm, loaded)

    return EngineCalls


@pytest.mark.parametrize("depth", [1, 2])
def test_any_sequence_of_calls_leaves_the_engine_usable(tiny_llama, depth):
    llm = wrap(make_engine(tiny_llama, depth=depth, max_model_len=64))
    run_state_machine_as_test(
        machine(llm, tiny_llama),
        settings=settings(
            max_examples=25, stateful_step_count=15, deadline=None, derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )  # fmt: skip
