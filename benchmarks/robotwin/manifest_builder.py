"""Build a task's manifest with upstream's expert check (script/eval_policy.py), sequentially, once.

From st_seed = 100000 * (1 + seed), exactly as the upstream loop: setup_demo(now_ep_num, seed, is_test=True, **args)
with render_freq 0, play_once(), close_env(); UnStableError or any other exception skips the seed (the expert
rejected it), except an exception that says the check itself could not run (out of host or GPU memory, a device
error, a missing file or module: check_failure): that fails the manifest job, its message's first line naming the
seed and the file, module or GPU error, and nothing is sealed or cached. The
seed is accepted only if plan_success and check_success(). For an accepted seed the loop then does what upstream
does before the policy acts: setup_demo again, generate_episode_descriptions(task, [info], N) and one
np.random.choice over the list; that position picks the stored seen and unseen TEXT. Upstream's Python `random` is
unseeded; by default (instruction_rng: seeded) the texts are drawn from a private generator seeded from the
episode's seed (benchmarks/robotwin/instructions.py), so a rebuild gives the same bytes.
close_env(clear_cache=...) with upstream's cadence.
Every setup upstream does, the builder does, in the same order, so upstream's cross-episode state (clutter xlim
drift) evolves here as there, from a fresh process's value; its value at each policy setup is recorded
(clutter_xlim_default). For the tasks whose check_success reads what play_once sets (tasks.PLAY_ONCE_STATE), those
attributes are recorded after the accepted expert run (expert_state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypedDict

import numpy as np

from benchmarks.robotwin import instructions
from benchmarks.robotwin.checkout import (
    RobotwinCheckout,
    clutter_xlim_default,
    set_clutter_xlim_default,
    simulator_rng_guard,
)
from benchmarks.robotwin.expert_check import (
    CheckSpec,
    Verdict,
    check_seed,
    parallel_verdicts,
    sequential_verdicts,
)
from benchmarks.robotwin.expert_state import EncodedValue
from benchmarks.robotwin.protocols import by_identity
from benchmarks.robotwin.tasks import CLUTTER_DRIFT_TASKS, INSTRUCTION_TYPES, PLAY_ONCE_STATE
from evalwf.benchmark.adapter import ManifestBody
from evalwf.benchmark.records import ManifestEpisode
from evalwf.common.errors import ManifestError
from evalwf.common.hashing import jsonable
from evalwf.common.json_types import JsonObject


def draw_positions(lengths: dict[str, int]) -> dict[str, int]:
    """Upstream draws once, np.random.choice(list of the configured type); the builder stores both types, so
    it draws from the same numpy state for each (identical when both lists have the same length). An empty list
    draws nothing (-1; main then uses the task name)."""
    state = np.random.get_state()
    positions = {}
    for kind in INSTRUCTION_TYPES:
        np.random.set_state(state)
        positions[kind] = int(np.random.choice(lengths[kind])) if lengths[kind] else -1
    return positions


class SkippedSeed(TypedDict):
    """A seed the expert check rejected, kept in the manifest's extra with why."""

    seed: int
    now_ep_num: int
    reason: str


class _RobotwinEpisodeOptions(ManifestEpisode, total=False):
    instruction_rng_seed: int  # the instruction texts' private generator's seed (instruction_rng: seeded)
    clutter_xlim_default: list[float]  # the hidden clutter default before this episode's setup (docs/robotwin.md)
    expert_state: dict[str, EncodedValue]  # what play_once left that check_success reads (PLAY_ONCE_STATE)


class RobotwinEpisode(_RobotwinEpisodeOptions):
    """One accepted seed of a RoboTwin manifest, with upstream's policy setup for it (policy_setup)."""

    env_seed: int
    now_ep_num: int
    expert_info: JsonObject
    expert_episode_info: JsonObject
    instruction_choices: dict[str, int]  # instruction type -> how many texts there were to choose from
    instruction_position: dict[str, int]  # instruction type -> the one chosen
    seeds_skipped_before: int
    instruction_seen: str | None  # the text (main: the task name where no template matches)
    instruction_unseen: str | None


def build_task_manifest(
    checkout: RobotwinCheckout,
    definition: JsonObject,
    *,
    max_seed_scan: int,
    log: Callable[[str], None] = print,
) -> ManifestBody:
    """The manifest of definition's task and task config; `_expert_check_workers` (host-local, not hashed) > 1
    checks seeds ahead in that many processes, giving the same accepted seeds (benchmarks/robotwin/expert_check.py)."""
    task, task_config = definition["task"], definition["task_config"]
    where = f"RoboTwin manifest {task_config}/{task}"
    with simulator_rng_guard(), checkout.activated():
        scan = _Scan(checkout, definition, where, log)
        workers = int(definition.get("_expert_check_workers") or 1)
        drifts = task in CLUTTER_DRIFT_TASKS and bool(scan.args.get("domain_randomization", {}).get("cluttered_table"))
        if workers > 1 and drifts:
            log(f"{where}: checking seeds one by one (clutter drift carries state from setup to setup)")
            workers = 1
        verdicts: Iterator[Verdict]
        start = definition["start_seed"]
        if workers > 1:
            log(f"{where}: checking seeds ahead in {workers} processes, taken in seed order")
            spec = CheckSpec(str(checkout.root), scan.line.name, task, task_config, scan.state_names, where)
            verdicts = parallel_verdicts(spec, start, max_seed_scan, workers, scan.accepted)
        else:
            verdicts = sequential_verdicts(scan.check, start, scan.accepted)
        try:
            return scan.run(verdicts, max_seed_scan)
        finally:
            verdicts.close()  # parallel: unchecked seeds cancelled, the workers stopped


class _Scan:
    """Upstream's loop over the expert check's verdicts in seed order, with one env in this process: a rejected
    seed is skipped; for an accepted one, the policy setup upstream does before the policy acts (setup_demo again,
    the instruction texts and the np.random draw, close_env with upstream's cache cadence), until num_episodes are
    accepted."""

    def __init__(self, checkout: RobotwinCheckout, definition: JsonObject, where: str, log: Callable[[str], None]):
        self.checkout, self.definition, self.where, self.log = checkout, definition, where, log
        self.task = definition["task"]
        self.args = checkout.eval_args(self.task, definition["task_config"])
        self.env = checkout.make_env(self.task)
        set_clutter_xlim_default(self.env)  # as in a fresh upstream process, whatever ran before in this one
        self.unstable_error = checkout.unstable_error()
        self.generate = checkout.description_generator()
        self.state_names = tuple(definition.get("play_once_state") or PLAY_ONCE_STATE.get(self.task, ()))
        self.rng_mode = definition["instruction_rng"]  # seeded | upstream, as planned (adapter.manifest_definition)
        self.line = by_identity(definition.get("protocol"))
        self.episodes: list[ManifestEpisode] = []
        self.skipped: list[SkippedSeed] = []

    def accepted(self) -> int:
        return len(self.episodes)

    def check(self, seed: int, now_ep_num: int) -> Verdict:
        return check_seed(self.env, self.args, seed, now_ep_num, self.unstable_error, self.state_names, self.where)

    def run(self, verdicts: Iterator[Verdict], max_seed_scan: int) -> ManifestBody:
        wanted, st_seed = self.definition["num_episodes"], self.definition["start_seed"]
        now_seed, since_last = st_seed, 0
        while len(self.episodes) < wanted:
            if now_seed - st_seed >= max_seed_scan:
                raise ManifestError(
                    f"{self.where}: only {len(self.episodes)} of {wanted} episodes accepted after scanning "
                    f"{max_seed_scan} seeds from {st_seed} (is the checkout's expert planner working?)"
                )
            verdict = next(verdicts)
            if verdict.seed != now_seed:
                raise ManifestError(f"{self.where}: verdict for seed {verdict.seed} handed out at seed {now_seed}")
            if verdict.log:
                self.log(verdict.log.rstrip("\n"))
            if verdict.failure is not None:  # the first line says which seed and what, for the job's error
                raise ManifestError(
                    f"{self.where}: seed {now_seed}: the expert check itself failed: {verdict.failure}\n"
                    "This is not a seed rejection: nothing is sealed or cached; fix the cause and rerun. "
                    f"The exception: {verdict.exception}"
                )
            if verdict.reason is not None:
                self.skipped.append({"seed": now_seed, "now_ep_num": len(self.episodes), "reason": verdict.reason})
                since_last += 1
            else:
                self.episodes.append(self.policy_setup(verdict, since_last))
                since_last = 0
            now_seed += 1
        return ManifestBody(
            self.episodes,
            {
                "start_seed": st_seed,
                "next_seed": now_seed,
                "seeds_scanned": now_seed - st_seed,
                "skipped_seeds": self.skipped,
                "skipped_by_reason": _count_reasons(self.skipped),
                "clear_cache_freq": int(self.args["clear_cache_freq"]),
                "robotwin_root": str(self.checkout.root),
            },
        )

    def policy_setup(self, verdict: Verdict, since_last: int) -> RobotwinEpisode:
        """The manifest entry of an accepted seed, from upstream's setup before its policy episode."""
        env, task, seed, index = self.env, self.task, verdict.seed, len(self.episodes)
        episode_info = verdict.episode_info or {}
        xlim_before = clutter_xlim_default(env)
        env.setup_demo(now_ep_num=index, seed=seed, is_test=True, **self.args)
        info = jsonable(episode_info["info"])
        # Upstream draws the texts with the unseeded Python random; by default a private generator seeded from the
        # episode's seed draws them here (benchmarks/robotwin/instructions.py).
        results, text_seed = instructions.episode_descriptions(
            self.generate, task, episode_info["info"], self.definition["instruction_list_length"], env_seed=seed,
            rng=self.rng_mode,
        )  # fmt: skip
        if not results and not self.line.task_name_when_no_text:
            raise ManifestError(f"{self.where}: seed {seed}: no instruction template matches {info}")
        texts = {kind: list((results or [{}])[0].get(kind) or []) for kind in INSTRUCTION_TYPES}
        positions = draw_positions({kind: len(texts[kind]) for kind in INSTRUCTION_TYPES})
        clear_cache_freq = int(self.args["clear_cache_freq"])
        env.close_env(clear_cache=((index + 2) % clear_cache_freq == 0))  # upstream: (succ_seed + 1) % freq
        entry: RobotwinEpisode = {  # type: ignore[typeddict-item]  (the instruction texts are set below, by type)
            "index": index,
            "seed": seed,
            "env_seed": seed,
            "now_ep_num": index,
            "expert_info": info,
            "expert_episode_info": jsonable({k: v for k, v in episode_info.items() if k != "info"}),
            "instruction_choices": {kind: len(texts[kind]) for kind in INSTRUCTION_TYPES},
            "instruction_position": positions,
            "seeds_skipped_before": since_last,
        }
        if text_seed is not None:
            entry["instruction_rng_seed"] = text_seed
        fallback = task if self.line.task_name_when_no_text else None  # main's build_instruction
        for kind in INSTRUCTION_TYPES:
            text = texts[kind][positions[kind]] if texts[kind] else fallback
            entry[f"instruction_{kind}"] = text  # type: ignore[literal-required]  (instruction_seen, _unseen)
        if xlim_before is not None:
            entry["clutter_xlim_default"] = xlim_before
        if verdict.state is not None:
            entry["expert_state"] = verdict.state
        self.log(f"{self.where}: episode {index} <- seed {seed} ({since_last} skipped before)")
        return entry


def _count_reasons(skipped: list[SkippedSeed]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in skipped:
        key = item["reason"].split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return counts
