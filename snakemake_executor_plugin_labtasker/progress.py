"""Campaign progress for the submitting terminal: batches done / submitted, episodes per minute over a recent
window, time left, and the other (manifest) jobs still waiting.

Jobs are counted by their task id (derived from the job's identity): a batch that Snakemake's --retries
resubmits is the same batch again, never a new one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evalwf.contract import EPISODES_RESOURCE

RATE_WINDOW_S = 600.0  # episodes per minute (and so the time left) over the last 10 minutes


def episodes_of(job: Any) -> int:
    """Episodes a (possibly grouped) job evaluates, from the `episodes` resource the workflow declares (0 for
    manifests and gather steps): the plugin never parses the workflow's wildcards."""
    total = 0
    for single in list(job.jobs) if job.is_group() else [job]:
        resources = getattr(single, "resources", None)
        try:
            total += int((resources.get(EPISODES_RESOURCE, 0) if hasattr(resources, "get") else 0) or 0)
        except (TypeError, ValueError):
            continue
    return total


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


@dataclass
class CampaignProgress:
    """What this Snakemake run submitted and saw finish; a line at most every `interval_s`.

    The rate is measured over the last `window_s` seconds (from the first finished batch until the window
    has filled): not over the whole run, whose start (manifests, waiting for a worker, loading the policy)
    says nothing about how fast batches finish now."""

    interval_s: float = 30.0
    window_s: float = RATE_WINDOW_S
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)  # the same moment, to compare with the queue's times
    batches: dict[str, int] = field(default_factory=dict)  # task id -> episodes, every batch submitted
    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    others: set[str] = field(default_factory=set)  # manifests (and any non-batch job) not finished yet
    finishes: list[tuple[float, int]] = field(default_factory=list)  # (when, episodes) of each batch done
    _last_line: float = float("-inf")
    _printed_all_done: bool = False

    @property
    def batches_submitted(self) -> int:
        return len(self.batches)

    @property
    def batches_done(self) -> int:
        return len(self.done)

    @property
    def batches_failed(self) -> int:
        return len(self.failed)

    @property
    def episodes_submitted(self) -> int:
        return sum(self.batches.values())

    @property
    def episodes_done(self) -> int:
        return sum(self.batches[key] for key in self.done)

    def submitted(self, key: str, episodes: int) -> None:
        """A job was submitted (again, after a failure: the same batch, pending once more). The campaign is
        unfinished again, so its next "all done" is a new one to print even if no round saw it in between."""
        self._printed_all_done = False
        if episodes:
            self.batches[key] = episodes
            self.failed.discard(key)
            self.done.discard(key)
        else:
            self.others.add(key)

    def finished(
        self, key: str, episodes: int, ok: bool, now: float | None = None, evaluated_before: bool = False
    ) -> None:
        """A job ended. `evaluated_before`: its task had succeeded before this run started (a resumed campaign
        finds it done at once): done, but not in the rate, which would otherwise count a whole earlier run's
        batches as finished in the first second."""
        if not episodes:
            self.others.discard(key)
            return
        now = time.monotonic() if now is None else now
        self.batches.setdefault(key, episodes)
        if ok:
            if key not in self.done and not evaluated_before:
                self.finishes.append((now, episodes))
            self.done.add(key)
            self.failed.discard(key)
        else:
            self.failed.add(key)

    def finished_before_run(self, finished_at: datetime | None) -> bool:
        """Whether a task the queue says finished at `finished_at` had finished before this run started."""
        return finished_at is not None and finished_at.timestamp() < self.started_wall

    def rate(self, now: float) -> tuple[float, float] | None:
        """(episodes per minute, over how many seconds) from the batches finished recently, or None before
        there is a measurement: once the window has filled, the episodes finished inside it over its length;
        before, the episodes finished after the first finish over the time since it (so the start-up before
        the first batch finished is never in it); with one finish only, since the start of the run."""
        if not self.finishes:
            return None
        first = self.finishes[0][0]
        if now - self.window_s >= first:
            start = now - self.window_s
        elif any(when > first for when, _ in self.finishes):
            start = first
        else:
            span = max(now - self.started, 1e-9)
            return 60.0 * sum(e for _, e in self.finishes) / span, span
        span = max(now - start, 1e-9)
        return 60.0 * sum(e for when, e in self.finishes if when > start) / span, span

    def line(self, running: int, now: float | None = None, queued: int | None = None, note: str = "") -> str | None:
        """A progress line every interval_s while anything of this run is active (manifests included), and
        once each time every submitted batch has finished (submitted() re-arms it: only a submission makes a
        finished campaign unfinished again). `note` follows the counts (what workers refuse)."""
        now = time.monotonic() if now is None else now
        finished = self.batches_done + self.batches_failed
        all_done = bool(self.batches) and finished == self.batches_submitted and not self.others
        first_all_done = all_done and not self._printed_all_done
        if not (self.batches or self.others) or (not first_all_done and now - self._last_line < self.interval_s):
            return None
        self._printed_all_done = self._printed_all_done or all_done
        self._last_line = now
        failed = f", {self.batches_failed} failed" if self.batches_failed else ""
        waiting = f", {queued} queued" if queued else ""
        if not self.batches:  # the manifests phase: "0/0 batches done" would read as an empty campaign
            return (
                f"[labtasker] progress: building {len(self.others)} manifest(s), {running} running{waiting}; "
                f"batches are submitted once their manifests are sealed{note}"
            )
        others = f", {len(self.others)} manifest/other job(s) not finished" if self.others else ""
        text = (
            f"[labtasker] progress: {self.batches_done}/{self.batches_submitted} batches done{failed}, "
            f"{running} running{waiting}, {self.episodes_done}/{self.episodes_submitted} episodes{others}{note}"
        )
        measured = self.rate(now)
        if measured is None:
            if not self.batches:
                return text
            return text + (", none evaluated by this run yet" if self.done else ", no batch finished yet")
        per_minute, span = measured
        text += f", {per_minute:.1f} episodes/min over the last {_duration(span)}"
        remaining = sum(e for key, e in self.batches.items() if key not in self.done and key not in self.failed)
        if per_minute > 0 and remaining:
            text += f", about {_duration(60.0 * remaining / per_minute)} left for the submitted batches"
        return text
