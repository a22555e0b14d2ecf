"""LIBERO batch records fabricated as the workers write them (extra.max_steps included), for the tests of what the
plan and the benchmarks price from a results directory."""

from __future__ import annotations

import json
from pathlib import Path


def record_batch(
    root: Path,
    suite: str,
    task: int,
    episodes: list[tuple[int, bool]],
    max_steps: int,
    step_s: float,
    run: str = "demo",
    setup_s: float = 1.0,
) -> None:
    """A LIBERO batch of `run`: (steps, success) per episode, each 2 s of reset + steps x step_s, ran under
    max_steps."""
    records = [
        {
            "index": i,
            "steps": steps,
            "success": success,
            "duration_s": 2.0 + steps * step_s,
            "extra": {"max_steps": max_steps, "max_steps_override": True},
        }
        for i, (steps, success) in enumerate(episodes)
    ]
    path = root / "results" / run / "libero" / "batches" / suite / str(task) / f"0000-{len(records)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = {
        "schema": "policy-eval.batch-result",
        "run": run,
        "benchmark": "libero",
        "suite": suite,
        "task": str(task),
        "episodes": records,
        "duration_s": sum(r["duration_s"] for r in records) + setup_s,
    }
    path.write_text(json.dumps(batch), encoding="utf-8")
