"""`evalwf policy check`: one observation per configured benchmark, in its exact format, against the policy server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from conftest import REPO, write_config

from evalwf.benchmark.adapter import BatchContext, TaskRef, benchmark_settings, get_adapter
from evalwf.benchmark.batches import EpisodeRange
from evalwf.cli.policy_check import check_benchmark, main
from evalwf.contract.loopback import free_port
from evalwf.plan.campaign import Campaign
from evalwf.plan.config import load_config, validate_config
from evalwf.plan.manifest import seal_manifest
from evalwf.policy.client import PolicyServerError
from evalwf.policy.episode_identity import EPISODE_KEY

STANDIN_SERVER = "{python} -m benchmarks.standin.policy_server --port {port}"


def config(tmp_path, policy: dict, *benchmarks: str) -> str:
    sections = {
        "libero": {"suites": {"libero_goal": [3]}, "episodes_per_task": 2, "batch_size": 1},
        "standin": {"suites": {"alpha": ["push"]}, "episodes_per_task": 2, "batch_size": 1},
        "robotwin": yaml.safe_load((REPO / "config" / "robotwin-standin.yaml").read_text())["benchmarks"]["robotwin"],
    }
    document = {
        "run": "check",
        "results_dir": str(tmp_path / "results"),
        "policy": {"name": "p", "startup_timeout_s": 30, **policy},
        "benchmarks": {name: sections[name] for name in benchmarks},
    }
    return str(write_config(tmp_path / "c.yaml", document))


def test_passes_and_prints_metadata_shapes_and_latency(tmp_path, capsys):
    configfile = config(tmp_path, {"command": STANDIN_SERVER + " --action-dim 7"}, "libero", "standin")
    assert main(["--configfile", configfile]) == 0
    out = capsys.readouterr().out
    assert "server metadata: {'server': 'standin-policy'" in out and "'action_dim': 7" in out
    assert "libero (libero_goal/3): sending {observation/image: uint8[224, 224, 3], " in out
    assert "observation/wrist_image: uint8[224, 224, 3], observation/state: float64[8], prompt: str(" in out
    assert "actions: float32[10, 7]; libero expects [horizon >= 5, 7]" in out
    assert "actions: float32[10, 7]; standin expects [horizon >= 5, >= 4]" in out
    assert out.count("latency: first ") == 2 and "policy check passed: p on libero, standin" in out


def test_fails_on_a_wrong_action_shape_naming_the_benchmark(tmp_path, capsys):
    configfile = config(tmp_path, {"command": STANDIN_SERVER + " --action-dim 8"}, "libero")
    assert main(["--configfile", configfile]) == 1
    err = capsys.readouterr().err
    assert "policy check FAILED" in err
    assert "libero: the policy answered actions of shape [10, 8], libero expects [horizon >= 5, 7]" in err


def test_external_server_in_robotwin_format_and_a_missing_one(tmp_path, capsys):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.standin.policy_server", "--port", str(port), "--action-dim", "14"],
        cwd=REPO,
    )
    try:
        configfile = config(tmp_path, {"url": f"ws://127.0.0.1:{port}"}, "robotwin")
        assert main(["--configfile", configfile]) == 0
        out = capsys.readouterr().out
        assert "sending {observation/image: uint8[240, 320, 3], observation/state: float64[14], prompt: " in out
        assert "observation/goal: float32[14]" in out and "robotwin expects [horizon >= 10, >= 14]" in out
    finally:
        server.terminate()
        server.wait(10)
    # nobody answers there any more: named once the handshake's wait (the policy's startup_timeout_s) is over
    configfile = config(tmp_path, {"url": f"ws://127.0.0.1:{port}", "startup_timeout_s": 2}, "robotwin")
    assert main(["--configfile", configfile]) == 1
    err = capsys.readouterr().err
    assert f"policy.url ws://127.0.0.1:{port}: no openpi websocket server answered the handshake within 2s" in err


def test_sample_observations_match_what_a_batch_sends():
    """The stand-in's sample is episode 0's first observation, as its evaluate_batch sends it."""
    from benchmarks.standin.sim import StandinEpisode, episode_instruction, episode_seed

    section = validate_config(
        {"run": "r", "policy": {"name": "p", "command": "x --port {port}"},
         "benchmarks": {"standin": {"suites": {"beta": ["pour"]}, "episodes_per_task": 1, "batch_size": 1}}}
    ).section_settings("standin")  # fmt: skip
    settings = benchmark_settings("standin", section)
    sample = get_adapter("standin").sample_observation(settings, TaskRef("standin", "beta", "pour"))
    seed = episode_seed("beta", "pour", 0, settings.seed)
    first = StandinEpisode(seed, episode_instruction("pour", seed), settings.tolerance, 0.0).observation()
    assert sample.observation.keys() == first.keys() and sample.observation["prompt"] == first["prompt"]
    assert all(np.array_equal(sample.observation[k], first[k]) for k in first if k != "prompt")


def test_evalwf_policy_check_is_wired(tmp_path):
    configfile = config(tmp_path, {"command": STANDIN_SERVER + " --action-dim 7"}, "standin")
    done = subprocess.run(
        [sys.executable, "-m", "evalwf.cli.main", "policy", "check", "--configfile", configfile, "--repeat", "1"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "policy check passed: p on standin" in done.stdout


CRASHING_SERVER = "{python} -c \"import sys; sys.exit('cannot load the checkpoint')\" --port {port}"


def sweep(tmp_path, *policies: dict) -> str:
    document = yaml.safe_load(Path(config(tmp_path, {"command": "unused --port {port}"}, "standin")).read_text())
    del document["policy"]
    document["policies"] = [{"startup_timeout_s": 30, **block} for block in policies]
    return str(write_config(tmp_path / "sweep.yaml", document))


def test_every_policy_of_a_sweep_is_checked_and_a_crashing_one_fails_the_check(tmp_path, capsys):
    """The second policy of a sweep crashes at start-up: the check fails naming it (it used to check the first
    policy only and say "passed"); --policy checks one policy alone."""
    configfile = sweep(
        tmp_path,
        {"name": "good", "command": STANDIN_SERVER + " --action-dim 7"},
        {"name": "broken", "command": CRASHING_SERVER},
    )
    assert main(["--configfile", configfile, "--repeat", "1"]) == 1
    captured = capsys.readouterr()
    assert "== policy good on standin" in captured.out and "== policy broken on standin" in captured.out
    assert "policy check passed" not in captured.out
    failures = captured.err.split("policy check FAILED:")[1]
    assert "policy broken: " in failures and "policy good" not in failures
    assert "policy broken: policy server exited with status 1 during startup" in failures
    assert "cannot load the checkpoint" in failures, "the tail of its log"
    (named,) = re.findall(r"log (\S+\.log):", failures)
    assert Path(named).is_file() and "cannot load the checkpoint" in Path(named).read_text(), "kept after the check"
    assert Path(named).is_relative_to(tmp_path / "results" / "check" / "policy-check"), named

    assert main(["--configfile", configfile, "--policy", "good", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "policy check passed: good on standin" in out and "broken" not in out
    assert main(["--configfile", configfile, "--policy", "nope"]) == 2
    assert "no policy 'nope' in this campaign (policies: good, broken)" in capsys.readouterr().err


def test_each_benchmarks_own_policy_is_checked_against_that_benchmark_only(tmp_path, capsys):
    """LIBERO's policy answers 7-D actions, RoboTwin's 14-D: each passes on its own benchmark (checked against both,
    either would fail)."""
    document = yaml.safe_load(
        Path(config(tmp_path, {"command": "unused --port {port}"}, "libero", "robotwin")).read_text()
    )
    del document["policy"]
    document["benchmarks"]["libero"]["policy"] = {"name": "seven", "command": STANDIN_SERVER + " --action-dim 7"}
    document["benchmarks"]["robotwin"]["policy"] = {"name": "fourteen", "command": STANDIN_SERVER + " --action-dim 14"}
    configfile = str(write_config(tmp_path / "per-benchmark.yaml", document))
    assert main(["--configfile", configfile, "--repeat", "1"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "policy check passed: seven on libero; fourteen on robotwin" in out
    assert out.count("latency: first ") == 2


def signature(value):
    """What a server that validates its input checks: keys, dtypes and shapes, the types of plain values."""
    if isinstance(value, dict):
        return {key: signature(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape)
    return type(value).__name__


class ValidatingPolicy:
    """A policy server that refuses any request unlike the campaign's (`expected`, once known): every key, the
    same shapes. Answers stand-still chunks of 10 four-dimensional actions."""

    def __init__(self, expected=None):
        self.expected, self.seen = expected, []

    def infer(self, request):
        got = signature(request)
        if self.expected is not None and got != self.expected:
            raise PolicyServerError(f"request refused: {got} is not {self.expected}")
        self.seen.append(got)
        return {"actions": np.zeros((10, 4), np.float32)}


def test_the_check_sends_exactly_what_a_campaign_batch_sends(tmp_path, capsys):
    """A server validating its input against the keys a campaign's job step really sends (recorded from the
    stand-in's evaluate_batch) accepts the check's request too: same keys (`evalwf/episode` included), same shapes;
    --verbose prints every value of it."""
    configfile = config(tmp_path, {"command": STANDIN_SERVER}, "standin")
    member = Campaign(load_config(configfile)).policy_campaigns()[0]
    plan = member.tasks_of("standin")[0]
    adapter, settings = get_adapter("standin"), member.settings("standin")
    definition = adapter.manifest_definition(settings, plan.ref.suite, plan.ref.task)
    cache = member.config.manifest_cache
    manifest = seal_manifest(adapter, definition, plan.ref.suite, plan.ref.task, plan.manifest_path, cache)
    campaign_side = ValidatingPolicy()
    context = BatchContext(plan.ref, EpisodeRange(0, 1), manifest, settings, campaign_side, tmp_path / "a", print)
    assert len(list(adapter.evaluate_batch(context))) == 1
    requests = campaign_side.seen
    assert requests and all(request == requests[0] for request in requests)
    assert EPISODE_KEY in requests[0]

    checked = ValidatingPolicy(expected=requests[0])
    assert check_benchmark(member, "standin", checked, repeat=1, verbose=True) == []
    assert checked.seen == [requests[0]], "the check's request keys and shapes are the job step's"
    out = capsys.readouterr().out
    assert f"{EPISODE_KEY}: {{benchmark: str('standin'), suite: str('alpha'), task: str('push'), episode: int" in out
    assert f"    {EPISODE_KEY}: " in out and "      benchmark: 'standin'" in out, "--verbose: every value"
