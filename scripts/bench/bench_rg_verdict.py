"""The Reasoning Gym verdict on hostile text: seconds per completion of about 1 MB (nanogrpo/tasks/reasoning_gym.py).

    python scripts/bench/bench_rg_verdict.py

Each completion is judged alone through the trainer's entry (rewards.judge), the scorer workers already started:
a linear extraction, an over-long answer refused unread, an answer that never finishes stopped at the timeout.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from nanogrpo import rewards  # noqa: E402
from nanogrpo.tasks import reasoning_gym as rg  # noqa: E402

rows = rg.rows("reasoning_gym:countdown", "test", 1)
gold = rows[0]["answer"]
MB = 1 << 20
cases = {
    "1 MB of '<answer>' repeated": "<answer>" * (MB // 8),
    "1 MB of '<answer>x' then one close": "<answer>x" * (MB // 9) + "</answer>",
    "1 MB of '</answer><answer>'": "</answer><answer>" * (MB // 17),
    "1 MB answer inside tags": "<answer>" + "1+" * (MB // 2) + "1</answer>",
    "1 MB of prose, then the gold": "x" * MB + f"<answer>{gold}</answer>",
    "power tower (never returns)": "<answer>9**9**9**9</answer>",
}
rewards.judge(rg.score, ["<answer>1</answer>"], rows)  # the workers started
for name, text in cases.items():
    t = time.perf_counter()
    got = rewards.judge(rg.score, [text], rows)
    print(f"{name:40s} {len(text):>8d} chars  verdict {got[0]}  {time.perf_counter() - t:.3f} s")
