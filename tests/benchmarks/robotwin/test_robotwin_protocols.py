"""benchmarks.robotwin.protocol: stable_2.0 and main, each against a stand-in of its layout (main's laid out by
benchmarks/robotwin/standin_layouts.py from the one stand-in tree): layout detection, a mismatched checkout refused
by name (also by the node checks `evalwf doctor` runs), main's per task config instruction default, the
accepted-seed stream in seed order, the step limits read from main's config folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robotwin_testlib import (
    ADAPTER,
    STANDIN_PATH,
    build,
    raw_section,
    run_batches,
    section,
    upstream_sequential_loop,
)

from benchmarks.robotwin import env_check
from benchmarks.robotwin.checkout import RobotwinCheckout
from benchmarks.robotwin.protocols import MAIN, STABLE, detect
from benchmarks.robotwin.standin_layouts import lay_main_checkout
from evalwf.benchmark.node_checks import run_checks
from evalwf.common.errors import ConfigError


@pytest.fixture(scope="module")
def main_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_main_checkout(tmp_path_factory.mktemp("robotwin-main") / "RoboTwin")


def test_each_stand_in_has_its_lines_layout(main_root):
    assert detect(STANDIN_PATH) is STABLE
    assert detect(main_root) is MAIN
    assert (main_root / "env_cfg" / "task_config" / "_eval_step_limit.yml").is_file()
    assert not (main_root / "task_config").exists()
    assert RobotwinCheckout(main_root, "main").eval_instruction("demo_clean") == "seen"
    assert RobotwinCheckout(main_root, "main").eval_instruction("demo_randomized") == "unseen"


def test_a_checkout_of_the_other_line_is_refused_naming_both(main_root):
    with pytest.raises(ConfigError, match=r"is a RoboTwin main checkout.*protocol is stable_2.0.*set protocol: main"):
        RobotwinCheckout(main_root, "stable_2.0")
    with pytest.raises(ConfigError, match=r"is a RoboTwin stable_2.0 checkout.*protocol is main.*protocol: stable_2"):
        RobotwinCheckout(STANDIN_PATH, "main")
    # the node checks (evalwf doctor, workers, scripts/setup_robotwin.sh) name it too, and stop there
    (checkout, module) = run_checks("robotwin", env_check.checks(str(main_root), ["demo_clean"], "stable_2.0"))
    assert not checkout.ok and "is a RoboTwin main checkout" in checkout.line()
    assert "set benchmarks.robotwin.protocol" in checkout.line()
    assert not module.ok
    passed = run_checks("robotwin", env_check.checks(str(main_root), ["demo_clean"], "main"))
    assert all(result.ok for result in passed), [result.line() for result in passed]
    assert "main layout" in passed[0].line()


def test_main_plans_each_task_configs_own_instruction_type(main_root, tmp_path):
    def suites(**overrides) -> list[str]:
        settings = section(**{"instruction_types": None, **overrides})
        return sorted({ref.suite for ref in ADAPTER.expand(settings)})

    assert suites() == ["demo_clean-unseen", "demo_randomized-unseen"]  # stable_2.0: eval.sh's unseen
    assert suites(protocol="main", robotwin_root=str(main_root)) == ["demo_clean-seen", "demo_randomized-unseen"]
    assert suites(protocol="main", robotwin_root=None) == ["demo_clean-seen", "demo_randomized-unseen"]  # upstream's
    edited = lay_main_checkout(tmp_path / "edited")  # the default is read from the checkout's task config
    config = edited / "env_cfg" / "task_config" / "demo_clean.yml"
    config.write_text(config.read_text().replace("eval_instruction: seen", "eval_instruction: unseen"))
    assert suites(protocol="main", robotwin_root=str(edited)) == ["demo_clean-unseen", "demo_randomized-unseen"]
    assert suites(protocol="main", instruction_types=["unseen", "seen"])[:2] == ["demo_clean-seen", "demo_clean-unseen"]


def test_main_accepts_the_first_seeds_in_seed_order_and_records_its_line(main_root):
    """Main's expert check (setup_demo, play_once, plan_success and check_success; same envs code) in seed order:
    the seeds of upstream's sequential loop, whichever order parallel checks would finish in."""
    task, task_config = "stack_blocks_two", "demo_randomized"
    main = build(section(protocol="main", robotwin_root=str(main_root), tasks=[task], episodes_per_task=12),
                 task_config, task)  # fmt: skip
    stable = build(section(tasks=[task], episodes_per_task=12), task_config, task)
    assert main["definition"]["protocol"] == MAIN.identity and stable["definition"]["protocol"] == STABLE.identity
    assert main["manifest_hash"] != stable["manifest_hash"]
    assert main["definition"]["task_config_sha256"] != stable["definition"]["task_config_sha256"]  # eval_instruction
    reference = upstream_sequential_loop(task, task_config, 0, 12)
    assert [ep["env_seed"] for ep in main["episodes"]] == reference["accepted"]
    assert [ep["env_seed"] for ep in main["episodes"]] == [ep["env_seed"] for ep in stable["episodes"]]
    assert main["extra"]["skipped_seeds"] == stable["extra"]["skipped_seeds"]


def test_main_batches_use_the_step_limits_of_its_config_folder(main_root, tmp_path):
    task = "stack_blocks_two"  # 800 steps in env_cfg/task_config/_eval_step_limit.yml, read by the env's setup_demo
    settings = section(protocol="main", robotwin_root=str(main_root), tasks=[task], episodes_per_task=2,
                       step_limit=None, instruction_types=None)  # fmt: skip
    manifest = build(settings, "demo_clean", task)
    records = run_batches(settings, "demo_clean-seen", task, manifest, 2, tmp_path)
    assert [r["extra"]["step_lim"] for r in records] == [800, 800]
    assert [r["extra"]["instruction"] for r in records] == [ep["instruction_seen"] for ep in manifest["episodes"]]
    with pytest.raises(ConfigError, match=r"says eval_instruction: seen, but this batch was planned for unseen"):
        run_batches(settings, "demo_clean-unseen", task, manifest, 2, tmp_path)


# Appended to a copy's envs/put_object_cabinet.py: every third seed's setups take 0.15 s longer, so that parallel
# checks finish out of seed order.
SLOW_EVERY_THIRD_SEED = """

import time as _time

_setup_demo = put_object_cabinet.setup_demo


def _slow_setup_demo(self, **kwargs):
    if kwargs["seed"] % 3 == 0:
        _time.sleep(0.15)
    return _setup_demo(self, **kwargs)


put_object_cabinet.setup_demo = _slow_setup_demo
"""


def test_seeds_checked_in_parallel_are_the_seeds_in_seed_order(tmp_path, capsys):
    """expert_check_workers: 3 processes check seeds ahead, finishing out of seed order (every third seed is slow);
    the verdicts are taken in seed order, so the manifest (seeds, skips with their reasons, texts, expert state) is
    the sequential one."""
    task, task_config = "put_object_cabinet", "demo_randomized"  # expert state, skip reasons, randomized
    protocol, root = "main", lay_main_checkout(tmp_path / "RoboTwin")  # the same code path under stable_2.0
    with (root / "envs" / f"{task}.py").open("a") as handle:
        handle.write(SLOW_EVERY_THIRD_SEED)
    common = {"protocol": protocol, "robotwin_root": str(root), "tasks": [task], "episodes_per_task": 12}
    one = build(section(**common), task_config, task)
    assert "processes" not in capsys.readouterr().out
    three = build(section(**common, expert_check_workers=3), task_config, task)
    assert "checking seeds ahead in 3 processes, taken in seed order" in capsys.readouterr().out
    assert three["definition"]["_expert_check_workers"] == 3 and three["manifest_hash"] == one["manifest_hash"]
    assert (three["episodes"], three["extra"]) == (one["episodes"], one["extra"])
    assert [ep["env_seed"] for ep in one["episodes"]] == upstream_sequential_loop(task, task_config, 0, 12)["accepted"]
    assert len(one["extra"]["skipped_seeds"]) >= 3


def test_clutter_drift_tasks_are_checked_one_by_one(main_root):
    messages: list[str] = []
    settings = section(protocol="main", robotwin_root=str(main_root), tasks=["dump_bin_bigbin"], episodes_per_task=3,
                       expert_check_workers=3)  # fmt: skip
    definition = ADAPTER.manifest_definition(settings, "demo_randomized", "dump_bin_bigbin")
    manifest = ADAPTER.build_manifest(definition, messages.append)
    assert any("checking seeds one by one (clutter drift" in message for message in messages)
    reference = upstream_sequential_loop("dump_bin_bigbin", "demo_randomized", 0, 3)
    assert [ep["env_seed"] for ep in manifest.episodes] == reference["accepted"]


def test_parallel_checks_in_robotwins_interpreter_seal_the_sequential_manifest(main_root, tmp_path, capfd):
    """Through the job body and RoboTwin's own interpreter (Python 3.10, numpy 1.26), the workers spawned from
    `python -m evalwf.job.sim_step`: the sealed manifest's episodes are the in-process sequential build's."""
    from lightenv import py310_python

    from evalwf.plan.campaign import Campaign
    from evalwf.plan.config import validate_config
    from evalwf.rules import jobs

    robotwin = {**raw_section(protocol="main", robotwin_root=str(main_root), episodes_per_task=6),
                "python": str(py310_python()), "expert_check_workers": 2}  # fmt: skip
    robotwin.update(tasks=["open_laptop"], task_configs=["demo_clean"], instruction_types=None)
    config = {"run": "t", "results_dir": str(tmp_path / "results"), "manifest_cache": str(tmp_path / "cache"),
              "policy": {"name": "p", "command": "x --port {port}"}, "benchmarks": {"robotwin": robotwin}}  # fmt: skip
    campaign = Campaign(validate_config(config))
    [output] = campaign.manifests()
    jobs.seal_task_manifest(campaign, output)
    captured = capfd.readouterr()
    assert "checking seeds ahead in 2 processes" in captured.out + captured.err
    sealed = json.loads(Path(output).read_text())
    assert sealed["definition"]["environment"]["python"].startswith("3.10.")
    settings = section(protocol="main", robotwin_root=str(main_root), tasks=["open_laptop"], episodes_per_task=6)
    reference = build(settings, "demo_clean", "open_laptop")
    assert sealed["episodes"] == reference["episodes"]
