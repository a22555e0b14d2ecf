"""The per-policy circuit breaker's bookkeeping (evalwf.queue.breaker) and the worker's use of it
(evalwf.worker.policy_breaker) with real policy server processes; the whole path through real workers and
snakemake is tests/plugin/test_policy_breaker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from evalwf.policy.client import PolicyServerError
from evalwf.policy.spec import PolicySpec
from evalwf.queue.breaker import (
    ABANDONED_AFTER_S,
    DEFAULT_MAX_FAILURES,
    CircuitOpen,
    Holder,
    PermitWaitStopped,
    PolicyBreaker,
    begin_generation,
    breaker_root,
    current_generation,
    open_policies,
)
from evalwf.worker.job_payload import JobStep
from evalwf.worker.policy_breaker import (
    PolicyCircuitOpen,
    WorkerBreakers,
    failure_cause,
    launch_digest,
    signature,
)
from evalwf.worker.policy_server import GuardedPolicyServer
from evalwf.worker.shared_server import SharedPolicyServer, Stopping

HOLDER = Holder.this_process("w0")


def breaker(workdir: Path, max_failures: int = 2, identity: str = "p@1", launch: str = "d1") -> PolicyBreaker:
    generation, _ = begin_generation(workdir, max_failures)
    return PolicyBreaker(workdir, identity, launch, generation)


def stopped() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


# -- starts --------------------------------------------------------------------------------------------------------


def test_n_failed_starts_open_the_breaker_and_nothing_starts_after(tmp_path):
    state = breaker(tmp_path)
    for number in (1, 2):
        permit = state.acquire_start(HOLDER, 60, threading.Event())
        assert permit is not None and permit.number == number
        failed, opened = permit.failed({"reason": f"crash {number}", "log": "h:/log", "detail": "tail"})
        assert failed == number and (opened is None) == (number == 1)
    assert opened is not None and opened.kind == "start" and opened.reason == "crash 2" and opened.failures == 2
    with pytest.raises(CircuitOpen, match="failed to start 2 time"):
        state.acquire_start(HOLDER, 60, threading.Event())
    assert open_policies(tmp_path, current_generation(tmp_path).id) == {"p@1": opened}


def test_racing_workers_get_at_most_n_permits_before_any_start_ended(tmp_path):
    """Eight workers at once, none of whose starts has ended: two permits, the others wait (here: told to stop)."""
    state = breaker(tmp_path)
    barrier = threading.Barrier(8)
    granted, waiting = [], []

    def worker(index: int) -> None:
        holder = Holder.this_process(f"w{index}")
        barrier.wait()
        try:
            granted.append(state.acquire_start(holder, 600, stopped()))
        except PermitWaitStopped:
            waiting.append(index)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(permit.number for permit in granted) == [1, 2] and len(waiting) == 6


def test_a_waiting_worker_proceeds_when_a_start_succeeded_and_success_proves_the_policy(tmp_path):
    state = breaker(tmp_path)
    first = state.acquire_start(HOLDER, 60, threading.Event())
    second = state.acquire_start(HOLDER, 60, threading.Event())
    assert first is not None and second is not None
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(state.acquire_start(HOLDER, 60, threading.Event())))
    waiter.start()
    first.succeeded()
    waiter.join(10)
    assert result == [None], "proven: no permit needed any more"
    # a proven policy's later failures (one bad node) never open its breaker
    assert second.failed({"reason": "oom"}) == (1, None)
    assert state.acquire_start(HOLDER, 60, threading.Event()) is None and state.open_record() is None


def test_stopped_and_abandoned_starts_do_not_count(tmp_path):
    state = breaker(tmp_path)
    state.acquire_start(HOLDER, 60, threading.Event()).aborted("the worker was stopping")
    # a holder on this host whose process is gone (a worker killed with -9 while loading)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = Holder("w-dead", HOLDER.host, int(dead.stdout), HOLDER.pid_namespace)
    assert state.acquire_start(gone, 600, threading.Event()).number == 2
    # a holder elsewhere that reported nothing long after its timeout
    elsewhere = Holder("w-far", "another-host", 1, 0)
    third = state.acquire_start(elsewhere, 60, threading.Event())
    assert third.number == 3
    record = state.directory / "start-0003.json"
    data = json.loads(record.read_text())
    data["deadline"] -= 60 + ABANDONED_AFTER_S + 1
    record.write_text(json.dumps(data))
    permits = [state.acquire_start(HOLDER, 60, threading.Event()) for _ in range(2)]
    assert [p.number for p in permits] == [4, 5], "1 stopped, 2 and 3 abandoned: two starts may still fail"
    assert {(state.directory / f"start-000{n}.aborted").exists() for n in (1, 2, 3)} == {True}
    with pytest.raises(PermitWaitStopped):
        state.acquire_start(HOLDER, 60, stopped())


def test_a_live_holder_elsewhere_is_waited_for(tmp_path):
    state = breaker(tmp_path, max_failures=1)
    assert state.acquire_start(Holder("w-far", "another-host", 1, 0), 600, threading.Event()).number == 1
    with pytest.raises(PermitWaitStopped):
        state.acquire_start(HOLDER, 600, stopped())


# -- batches -------------------------------------------------------------------------------------------------------


def test_first_batches_failing_alike_open_it_and_differing_or_succeeding_ones_do_not(tmp_path):
    state = breaker(tmp_path, identity="alike@1")
    assert state.batch_failed("t_a", "ValueError: shape (#, #)", {"reason": "ValueError: shape (10, 6)"}) is None
    assert state.batch_failed("t_a", "ValueError: shape (#, #)", {"reason": "again"}) is None, "a retry: same batch"
    opened = state.batch_failed("t_b", "ValueError: shape (#, #)", {"reason": "ValueError: shape (10, 6)"})
    assert opened is not None and opened.kind == "batches" and opened.failures == 2
    assert "first 2 batches all failed for the same reason: ValueError: shape (10, 6)" in opened.summary()

    differing = PolicyBreaker(tmp_path, "differ@1", "d", current_generation(tmp_path))
    differing.batch_failed("t_a", "RuntimeError: a", {})
    assert differing.batch_failed("t_b", "RuntimeError: b", {}) is None
    unknown = PolicyBreaker(tmp_path, "unknown@1", "d", current_generation(tmp_path))
    unknown.batch_failed("t_a", None, {})
    assert unknown.batch_failed("t_b", None, {}) is None, "no cause found: never 'the same reason'"
    proven = PolicyBreaker(tmp_path, "proven@1", "d", current_generation(tmp_path))
    proven.batch_failed("t_a", "E: x", {})
    proven.batch_succeeded()
    assert proven.batch_failed("t_b", "E: x", {}) is None
    assert sorted(open_policies(tmp_path, current_generation(tmp_path).id)) == ["alike@1"]


# -- what resets it ------------------------------------------------------------------------------------------------


def test_a_new_submission_or_a_changed_launch_starts_afresh_and_zero_is_off(tmp_path):
    state = breaker(tmp_path, max_failures=1)
    state.acquire_start(HOLDER, 60, threading.Event()).failed({"reason": "crash"})
    with pytest.raises(CircuitOpen):
        state.check()
    changed = PolicyBreaker(tmp_path, "p@1", "d2", current_generation(tmp_path))  # e.g. a raised startup timeout
    assert changed.acquire_start(HOLDER, 60, threading.Event()).number == 1

    generation, previous = begin_generation(tmp_path, 3)
    assert previous.id == state.directory.parent.name and generation.max_failures == 3
    assert "p@1" in open_policies(tmp_path, previous.id), "what the next submitter names first"
    assert PolicyBreaker(tmp_path, "p@1", "d1", generation).open_record() is None

    begin_generation(tmp_path, 0)
    off = PolicyBreaker(tmp_path, "p@1", "d1", current_generation(tmp_path))
    assert not off.enabled and off.acquire_start(HOLDER, 60, threading.Event()) is None


def test_without_a_submitter_s_generation_the_default_applies(tmp_path):
    assert current_generation(tmp_path).max_failures == DEFAULT_MAX_FAILURES
    breaker_root(tmp_path).mkdir(parents=True)
    (breaker_root(tmp_path) / "generation.json").write_text('{"generation": "../../x", "max_failures": -1}')
    generation = current_generation(tmp_path)
    assert generation.id == "none" and generation.max_failures == DEFAULT_MAX_FAILURES


# -- the worker's side, with real server processes --------------------------------------------------------------


def job_step(workdir: Path, command: str, timeout: float = 30) -> JobStep:
    policy = PolicySpec.from_config({"name": "p", "command": command, "startup_timeout_s": timeout})
    return JobStep(str(workdir), [], [], [], policy, "c")


def test_the_worker_starts_a_crashing_server_n_times_then_fails_at_once(tmp_path):
    launches = tmp_path / "launches"
    step = job_step(tmp_path, f"echo started >> {launches}; echo 'ImportError: no openpi' >&2; exit 3")
    begin_generation(tmp_path, 2)
    breakers = WorkerBreakers("w0", "host-a")
    shared = SharedPolicyServer(GuardedPolicyServer(log_dir=tmp_path / "logs"))
    stop = threading.Event()
    messages = []
    for _ in range(2):
        with pytest.raises(PolicyServerError) as error:
            breakers.check(step)
            with shared.lease(step.policy, stop, breakers.start_guard(step, stop)):
                pass
        messages.append(str(error.value))
    assert "exited with status 3 during startup" in messages[0].splitlines()[0], "the cause comes first"
    assert "failed start 1 of the 2" in messages[0]
    assert "is stopped for this submission" in messages[1]
    assert "its other batches fail without starting it" in messages[1]
    with pytest.raises(PolicyCircuitOpen, match="failed to start 2 time") as refused:
        breakers.check(step)
    assert refused.value.error_type == "PolicyCircuitOpen"
    assert launches.read_text().count("started") == 2
    (record,) = open_policies(tmp_path, current_generation(tmp_path).id).values()
    assert record.log == f"host-a:{tmp_path / 'logs' / 'policy-server-p-2.log'}" and "no openpi" in record.detail
    assert record.identity == step.policy.identity


def test_a_worker_stopped_while_its_server_loads_does_not_charge_the_policy(tmp_path):
    step = job_step(tmp_path, "sleep 60")
    begin_generation(tmp_path, 1)
    breakers = WorkerBreakers("w0", "host-a")
    server = GuardedPolicyServer(log_dir=tmp_path / "logs")
    shared = SharedPolicyServer(server)
    stop = threading.Event()
    threading.Timer(1.0, lambda: (stop.set(), server.process.stop())).start()  # a stopping worker's server dies
    with pytest.raises(PolicyServerError), shared.lease(step.policy, stop, breakers.start_guard(step, stop)):
        pass
    state = PolicyBreaker(tmp_path, step.policy.identity, launch_digest(step.policy), current_generation(tmp_path))
    assert state.open_record() is None and (state.directory / "start-0001.aborted").exists()
    # a worker waiting for another worker's start of the same policy stops waiting when told to stop
    assert state.acquire_start(Holder("w-far", "another-host", 1, 0), 600, threading.Event()).number == 2
    later = threading.Event()
    threading.Timer(0.5, later.set).start()
    with pytest.raises(Stopping), shared.lease(step.policy, later, breakers.start_guard(step, later)):
        pass


def test_unwritable_records_never_stop_work(tmp_path):
    step = job_step(tmp_path, "exit 0")
    (tmp_path / ".snakemake").write_text("not a directory")
    breakers = WorkerBreakers("w0", "host-a")
    breakers.check(step)
    breakers.batch_done(step, "t_a", ok=False)
    assert breakers.start_guard(step, threading.Event()) is not None


# -- the cause of a failed batch --------------------------------------------------------------------------------


IN_PROCESS = """\
[12:00:01] standin alpha/reach episodes 0..1: start
RuntimeError: a line some library printed, not raised
[12:00:02] FAILED: ValueError: stand-in simulator needs actions of at least 2 values, got 1
RuleException:
ValueError in file /x/workflow/rules/evaluate.smk, line 21:
stand-in simulator needs actions of at least 2 values, got 1
"""
OTHER_INTERPRETER = """\
Traceback (most recent call last):
  File "/x/benchmarks/libero/adapter.py", line 51, in infer
ValueError: policy returned actions of shape (10, 6); LIBERO needs [..., 7]
[12:00:09] FAILED: SimulatorEnvError: libero t3 batch 0005-5 failed in /v/python (exit status 1); its output is above
RuleException:
SimulatorEnvError in file /x/workflow/rules/evaluate.smk, line 21:
"""


def test_the_cause_of_a_failed_batch_is_its_root_exception_and_numbers_do_not_distinguish():
    assert failure_cause(IN_PROCESS) == "ValueError: stand-in simulator needs actions of at least 2 values, got 1"
    cause = failure_cause(OTHER_INTERPRETER)
    assert cause == "ValueError: policy returned actions of shape (10, 6); LIBERO needs [..., 7]"
    assert signature(cause) == signature(cause.replace("(10, 6)", "(8, 5)"))
    assert signature(cause) != signature(failure_cause(IN_PROCESS))
    assert failure_cause("Killed\n") is None and signature(None) is None
    hung = "[1] FAILED: PolicyServerError: policy server ws://127.0.0.1:{} did not answer within 5s (policy.infer_...)"
    assert signature(failure_cause(hung.format(40001))) == signature(failure_cause(hung.format(51234)))


def test_records_are_complete_or_absent(tmp_path):
    """No partial record is ever visible: each is hard-linked into place from a complete temporary file."""
    state = breaker(tmp_path)
    state.acquire_start(HOLDER, 60, threading.Event())
    names = os.listdir(state.directory)
    assert names == ["start-0001.json"], names
    assert json.loads((state.directory / names[0]).read_text())["holder"]["worker"] == "w0"


SNAKEMAKE_END = """\
Shutting down, this might take some time.
Exiting because a job execution failed. Look below for error messages
Complete log(s): /x/.snakemake/log/2026-12-04T120009.000000.snakemake.log
"""


def test_a_stopped_policy_s_message_quotes_the_batches_first_error_not_snakemake_s_last_words(tmp_path):
    """The detail kept with a failed batch (what the submitter's one message quotes) runs up to the line that
    states its cause: a job step's log ends with Snakemake's "Shutting down ..." lines, which explain nothing."""
    from snakemake_executor_plugin_labtasker.policy_breaker import stop_message

    begin_generation(tmp_path, 1)
    step = job_step(tmp_path, "unused --port {port}")
    log_path = tmp_path / "step.log"
    log_path.write_text(OTHER_INTERPRETER + SNAKEMAKE_END)
    WorkerBreakers("w0", "host-a").batch_done(step, "t_a", ok=False, log_path=log_path)
    (record,) = open_policies(tmp_path, current_generation(tmp_path).id).values()
    quoted = [line for line in stop_message(record, 0).splitlines() if line.startswith("    | ")]
    assert quoted[-1] == "    | ValueError: policy returned actions of shape (10, 6); LIBERO needs [..., 7]", quoted
    assert not any("Shutting down" in line or "Complete log" in line for line in quoted), quoted
