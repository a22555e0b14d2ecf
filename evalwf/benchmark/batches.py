"""Split a task's episodes into batches: the unit of scheduling, retry and result files."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class EpisodeRange:
    """Episodes [start, start + count) of one task."""

    start: int
    count: int

    @property
    def stop(self) -> int:
        return self.start + self.count

    @property
    def label(self) -> str:
        """The batch's file stem, e.g. '0005-5' (start zero-padded so listings sort)."""
        return f"{self.start:04d}-{self.count}"

    def indices(self) -> list[int]:
        return list(range(self.start, self.stop))


def plan_batches(num_episodes: int, batch_size: int) -> list[EpisodeRange]:
    """Consecutive batches of batch_size covering [0, num_episodes); the last one may be shorter."""
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    if not 1 <= batch_size <= num_episodes:
        raise ValueError(f"batch_size must be in [1, {num_episodes}], got {batch_size}")
    return [EpisodeRange(start, min(batch_size, num_episodes - start)) for start in range(0, num_episodes, batch_size)]
