"""The validated campaign config as one frozen value: what validation (evalwf.plan.config.validate_config) produces
and every reader of the campaign takes, instead of a dict that any caller could change and every caller re-derives.

The derived facts (which policies evaluate which benchmark, the baseline, whether the campaign has several
policies) are computed once, here, from the validated document. Readers take what they need from attributes and
methods named for it (`config.benchmarks[name].settings()`, `config.manifest_cache`); the value is no mapping, so
`config["benchmarks"]` is a TypeError, not a second way in. The whole document is `config.document()`, a copy: what
the run's snapshot (results/<run>/campaign.yaml) records. Nothing can change the campaign after validation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypedDict

from evalwf.common.json_types import JsonValue
from evalwf.policy.schema import PolicyBlock
from evalwf.policy.spec import PolicySpec

# Where a config gives policies: the top level (the default of every benchmark without its own) and a benchmark's
# section (that benchmark's own). Each place takes at most one of its keys.
TOP_POLICY_KEYS = ("policy", "policies", "policy_sweep")
SECTION_POLICY_KEYS = ("policy", "policies")
# What a benchmark's section may hold besides its benchmark's settings: never part of what shapes an episode.
SECTION_CAMPAIGN_KEYS = (*SECTION_POLICY_KEYS, "baseline")


# A benchmark's section as a config gives it: its settings (shaped by its schema.yaml) and maybe its policy keys.
SectionDocument = dict[str, JsonValue]


class PolicySweepBlock(TypedDict, total=False):
    """`policy_sweep`: one command template over several checkpoints (expanded into `policies` by validation)."""

    command: str
    checkpoints: dict[str, str]  # policy name -> checkpoint
    env: dict[str, str | int | float | bool]
    startup_timeout_s: float
    infer_timeout_s: float


class AdaptiveBlock(TypedDict):
    """`adaptive:` as validation fills it (every key has a schema default)."""

    alpha: float
    drop: str
    margin_pp: float
    min_episodes: int
    round_episodes: int
    speculate_rounds: int


class ConfigDocument(TypedDict, total=False):
    """A campaign config as YAML gives it (evalwf/plan/config.schema.yaml); validated, `run` and `benchmarks` are
    there and every key with a default is filled."""

    run: str
    results_dir: str
    manifest_cache: str
    policy: PolicyBlock
    policies: list[PolicyBlock]
    policy_sweep: PolicySweepBlock
    baseline: str
    adaptive: AdaptiveBlock
    benchmarks: dict[str, SectionDocument]
    reference: dict[str, JsonValue]  # "source": text; <benchmark>: {suite: percent}


def section_settings(section: Mapping[str, JsonValue]) -> SectionDocument:
    """A benchmark's section without the campaign keys it may hold (its policies, its baseline): what its
    adapter, its manifests and its batches read."""
    return {key: copy.deepcopy(value) for key, value in section.items() if key not in SECTION_CAMPAIGN_KEYS}


@dataclass(frozen=True)
class AdaptiveConfig:
    """The validated `adaptive:` block (its defaults come from the schema)."""

    alpha: float
    drop: str  # "worse-than-best" | "worse-than-baseline"
    margin_pp: float
    min_episodes: int
    round_episodes: int
    speculate_rounds: int  # operational: how far racing policies run ahead of the decisions

    @classmethod
    def of(cls, block: AdaptiveBlock) -> AdaptiveConfig:
        return cls(
            alpha=float(block["alpha"]),  # type: ignore[arg-type]
            drop=str(block["drop"]),
            margin_pp=float(block["margin_pp"]),  # type: ignore[arg-type]
            min_episodes=int(block["min_episodes"]),  # type: ignore[call-overload]
            round_episodes=int(block["round_episodes"]),  # type: ignore[call-overload]
            speculate_rounds=int(block["speculate_rounds"]),  # type: ignore[call-overload]
        )


@dataclass(frozen=True)
class BenchmarkConfig:
    """One benchmark's section: its policies (its own, else the campaign's), the baseline it is compared against,
    and its settings (the section less those campaign keys)."""

    name: str
    policies: tuple[PolicySpec, ...]
    baseline: str
    episodes_per_task: int
    batch_size: int | Mapping[str, Mapping[str, int | None]]  # a number, or {auto: ...} (evalwf.plan.batch_sizes)
    _settings: Mapping[str, JsonValue] = field(repr=False)

    @property
    def policy_names(self) -> list[str]:
        return [policy.name for policy in self.policies]

    def settings(self) -> SectionDocument:
        """The validated section without its campaign keys (a copy): what its adapter, its manifests and its
        batches read (evalwf.benchmark.adapter.benchmark_settings makes the typed settings of it)."""
        return copy.deepcopy(dict(self._settings))


@dataclass(frozen=True)
class CampaignConfig:
    """A validated campaign config (evalwf.plan.config.validate_config builds it; nothing else should)."""

    run: str
    results_dir: str
    manifest_cache: str
    benchmarks: Mapping[str, BenchmarkConfig]
    policies: tuple[PolicySpec, ...]  # every policy that evaluates some benchmark, once each, in config order
    baseline: str  # `baseline`, else the first policy: derived, never written into the document
    several_policies: bool  # results go to <results_dir>/<run>/<policy>/<benchmark>/
    adaptive: AdaptiveConfig | None
    reference: Mapping[str, Mapping[str, float] | str]  # "source": text; <benchmark>: {suite: percent}
    _document: Mapping[str, JsonValue] = field(repr=False, compare=False)

    def with_results_dir(self, results_dir: str) -> CampaignConfig:
        """The same campaign writing under another results_dir (a snapshot read from a run's folder)."""
        return replace(self, results_dir=results_dir, _document={**self._document, "results_dir": results_dir})

    def benchmark_policies(self) -> dict[str, list[str]]:
        """Benchmark -> the names of the policies that evaluate it, in config order."""
        return {name: section.policy_names for name, section in self.benchmarks.items()}

    def benchmark_baseline(self, benchmark: str) -> str:
        """The policy the others are compared with on `benchmark`."""
        return self.benchmarks[benchmark].baseline

    def section_settings(self, benchmark: str) -> SectionDocument:
        """The benchmark's validated section without its campaign keys (a copy)."""
        return self.benchmarks[benchmark].settings()

    def reference_scores(self, benchmark: str) -> dict[str, float]:
        """The scores a paper reports for `benchmark`, per suite (and maybe 'average'); {} when none are given."""
        scores = self.reference.get(benchmark)
        return dict(scores) if isinstance(scores, Mapping) else {}

    @property
    def reference_source(self) -> str | None:
        source = self.reference.get("source")
        return source if isinstance(source, str) else None

    def reference_block(self) -> dict[str, JsonValue]:
        """`reference:` as the validated document holds it (a copy): what a plan's digest hashes, so that the
        digest of a config stays what it was."""
        return copy.deepcopy(dict(self._document["reference"]))  # type: ignore[arg-type]

    def adaptive_block(self) -> AdaptiveBlock | None:
        """`adaptive:` as the validated document holds it (a copy; None when the campaign is not adaptive): what
        a round's decision rule takes as its params, so that changing alpha decides again and nothing else does
        (speculate_rounds, which only says when batches start, is left out)."""
        block = self._document.get("adaptive")
        if block is None:
            return None
        return {key: copy.deepcopy(value) for key, value in block.items() if key != "speculate_rounds"}  # type: ignore[return-value]

    def document(self) -> dict[str, JsonValue]:
        """The validated config as YAML would write it (a copy): what the run's snapshot records."""
        return copy.deepcopy(dict(self._document))
