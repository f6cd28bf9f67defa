"""report.summary: why each configuration's repeats stopped, as the report shows it."""

import numpy as np
import pandas as pd

from bubblelab.report.summary import with_repeat_stops


def test_each_stop_reason_in_words():
    predictions = pd.DataFrame({"streams": [1, 8, 32, 64]})
    provenance = {
        "repeats": [
            {"streams": 1, "stop": "known", "pairs": 8, "spent_s": 17.2},
            {"streams": 8, "stop": "budget spent", "pairs": 12, "spent_s": 31.0},
            {"streams": 32, "stop": "out of reach", "pairs": 4, "spent_s": 9.1,
             "pairs_needed": 61.7, "pairs_affordable": 14.0},
        ]
    }  # fmt: skip
    stops = with_repeat_stops(predictions, provenance)["repeat_stop"].tolist()
    assert stops[:3] == [
        "known to ±1 point in this process after 8 pairs (17 s)",
        "budget spent after 12 pairs (31 s)",
        "±1 point out of reach (~62 pairs) after 4 pairs (9 s)",
    ]
    assert pd.isna(stops[3])  # no record for 64 streams
    # A record from before pairs_needed was kept still says why.
    old = {"repeats": [{"streams": 1, "stop": "out of reach", "pairs": 4, "spent_s": 9.0,
                        "pairs_needed": np.nan}]}  # fmt: skip
    assert with_repeat_stops(predictions.head(1), old)["repeat_stop"][0] == (
        "out of reach after 4 pairs (9 s)"
    )
