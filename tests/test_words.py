"""core.words: a count and its noun agree wherever a sentence says one."""

from bubblelab.core.words import counted


def test_a_count_and_its_noun_agree():
    assert counted(1, "pair") == "1 pair" and counted(1.0, "stream") == "1 stream"
    assert counted(0, "step") == "0 steps" and counted(3, "run") == "3 runs"
    assert counted(32.0, "stream") == "32 streams"  # a float that is whole reads whole
    assert counted(31.5, "stream") == "31.5 streams"  # a median is not cut to a whole number
