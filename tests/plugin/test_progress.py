"""Progress lines for the submitting terminal (real CampaignProgress objects, explicit clocks)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from conftest import missing_facts

from snakemake_executor_plugin_labtasker.progress import CampaignProgress, episodes_of


def test_episodes_come_from_the_episodes_resource():
    def job(resources):
        return SimpleNamespace(is_group=lambda: False, resources=resources)

    assert episodes_of(job({"gpu": 1, "episodes": 5})) == 5
    assert episodes_of(SimpleNamespace(is_group=lambda: True, jobs=[job({"episodes": 2}), job({"episodes": 1})])) == 3
    assert episodes_of(job({"gpu": 0})) == 0, "a manifest job declares no episodes"


def test_progress_line_rate_and_time_left():
    progress = CampaignProgress(interval_s=30, started=0.0)
    assert progress.line(0, now=100) is None, "nothing submitted yet"
    for batch in "abcd":
        progress.submitted(batch, 5)
    progress.finished("a", 5, ok=True, now=30.0)
    progress.finished("b", 5, ok=False, now=30.0)
    line = progress.line(running=2, now=60.0)
    # one finish only: measured since the start of the run
    facts = ("[labtasker] progress:", "1/4 batches done", "1 failed", "2 running", "5/20 episodes")
    assert not missing_facts(line, *facts, "5.0 episodes/min", "last 1m00s", "about 2m00s left"), line
    assert progress.line(running=2, now=70.0) is None, "at most one line per interval"
    progress.finished("c", 5, ok=True, now=75.0)
    progress.finished("d", 5, ok=True, now=75.0)
    assert "3/4 batches done" in progress.line(running=0, now=75.0), "printed once when all have finished"
    assert progress.line(running=0, now=80.0) is None


def test_while_only_manifest_jobs_wait_the_line_names_that_phase():
    progress = CampaignProgress(interval_s=30, started=0.0)
    progress.submitted("m1", 0)
    progress.submitted("m2", 0)
    line = progress.line(running=1, queued=1, now=10.0)
    facts = ("building 2 manifest(s)", "1 running", "1 queued", "batches are submitted once their manifests")
    assert not missing_facts(line, *facts) and "batches done" not in line, line
    progress.finished("m1", 0, ok=True)
    progress.submitted("b1", 4)
    line = progress.line(running=1, now=40.0)
    facts = ("0/1 batches done", "1 running", "0/4 episodes", "1 manifest/other job(s) not finished")
    assert not missing_facts(line, *facts, "no batch finished yet") and "left" not in line, line
    progress.finished("m2", 0, ok=True)
    progress.finished("b1", 4, ok=True, now=50.0)
    assert progress.line(running=0, now=50.0).startswith("[labtasker] progress: 1/1 batches done, 0 running")


def test_time_left_comes_from_a_recent_window_not_the_whole_run():
    """A slow start (manifests, no worker yet, a 10-minute checkpoint load) must not slow the estimate down:
    once batches finish steadily, the rate is theirs."""
    progress = CampaignProgress(interval_s=1, window_s=600, started=0.0)
    for index in range(40):
        progress.submitted(f"b{index}", 5)
    # nothing finishes for 20 minutes, then one 5-episode batch every 30 s
    for index in range(10):
        progress.finished(f"b{index}", 5, ok=True, now=1200.0 + 30 * index)
    line = progress.line(running=1, now=1470.0)
    # 9 batches after the first one in 270 s: 10 episodes/min; 30 batches (150 episodes) left: 15 minutes
    assert "10/40 batches done, 1 running, 50/200 episodes" in line, line
    assert ", 10.0 episodes/min over the last 4m30s, about 15m00s left for the submitted batches" in line, line
    whole_run = 60 * 50 / 1470.0  # what the rate over the whole run would say: about 2 episodes/min
    assert f"{whole_run:.1f} episodes/min" not in line
    # the window fills: only the last 10 minutes count; when batches get slower, so does the estimate
    for index in range(10, 20):
        progress.finished(f"b{index}", 5, ok=True, now=1470.0 + 60 * (index - 9))
    line = progress.line(running=1, now=2070.0)
    assert ", 5.0 episodes/min over the last 10m00s, about 20m00s left for the submitted batches" in line, line


def test_a_retried_batch_is_the_same_batch_not_a_new_one():
    """Snakemake's --retries resubmits a failed job under the same task id: it is pending again, not a
    third batch (today: "0/3 batches" for two batches, one retried)."""
    progress = CampaignProgress(interval_s=30, started=0.0)
    progress.submitted("t_a", 2)
    progress.submitted("t_b", 2)
    progress.finished("t_a", 2, ok=False, now=10.0)
    assert progress.line(running=1, now=10.0).startswith("[labtasker] progress: 0/2 batches done, 1 failed")
    progress.submitted("t_a", 2)  # the retry
    progress.finished("t_b", 2, ok=True, now=20.0)
    progress.finished("t_a", 2, ok=True, now=30.0)
    line = progress.line(running=0, now=30.0)
    assert line.startswith("[labtasker] progress: 2/2 batches done, 0 running, 4/4 episodes"), line
    assert "failed" not in line and "left" not in line


def test_a_retry_that_finishes_between_two_rounds_still_gets_its_final_line():
    """Everything finished (one batch failed: the "all done" line is printed), then --retries resubmits the
    failed batch and it finishes before the next status round: that round must print the final line (2/2), even
    inside interval_s. It used to stay silent: no round had seen the campaign unfinished in between, so the
    line counted as already printed (CI failure of test_visible_waiting with fast warm job steps)."""
    progress = CampaignProgress(interval_s=30, started=0.0)
    progress.submitted("t_a", 2)
    progress.submitted("t_b", 2)
    progress.finished("t_a", 2, ok=False, now=10.0)
    progress.finished("t_b", 2, ok=True, now=10.0)
    assert progress.line(running=0, now=10.0).startswith("[labtasker] progress: 1/2 batches done, 1 failed")
    progress.submitted("t_a", 2)  # the retry, claimed and finished before the next round
    progress.finished("t_a", 2, ok=True, now=12.0)
    line = progress.line(running=0, now=13.0)
    assert line is not None and line.startswith("[labtasker] progress: 2/2 batches done, 0 running, 4/4 episodes")
    assert progress.line(running=0, now=14.0) is None, "printed once"


def test_batches_a_resumed_run_finds_already_evaluated_are_done_but_not_in_the_rate():
    """A rerun finds the earlier run's batches succeeded in the queue at once: counted done, never as evaluated in
    the run's first second (the line said thousands of episodes per minute over 0m00s)."""
    progress = CampaignProgress(interval_s=0.0, started=100.0, started_wall=1_000_000.0)
    for index in range(40):
        progress.submitted(f"old{index}", 5)
        progress.submitted(f"new{index}", 5)
    earlier = datetime.fromtimestamp(999_000.0, UTC)
    for index in range(40):
        assert progress.finished_before_run(earlier)
        progress.finished(f"old{index}", 5, ok=True, now=100.2, evaluated_before=progress.finished_before_run(earlier))
    line = progress.line(running=2, now=100.5)
    assert "40/80 batches done" in line and "200/400 episodes" in line, line
    assert "episodes/min" not in line and "none evaluated by this run yet" in line, line
    assert not progress.finished_before_run(datetime.fromtimestamp(1_000_060.0, UTC))
    progress.finished("new0", 5, ok=True, now=160.0)
    line = progress.line(running=2, now=160.0)
    assert "5.0 episodes/min over the last 1m00s" in line, line
