"""Instruction texts of an episode, drawn with upstream's own generator (description/utils/
generate_episode_instructions.py) but from a private Python `random` generator seeded from the episode's seed.

Upstream calls generate_episode_descriptions with the module-level `random` never seeded (templates shuffled with
random.shuffle, object wording picked with random.choice), so a rebuilt manifest got other texts for the same
seeds. Here the generator module's `random` is swapped, for the one call, for a `random.Random(seed)` instance:
the same functions (shuffle, choice) over the same candidates, so the same distribution, but a fixed draw per
episode, and the caller's global `random` is neither read nor advanced. `instruction_rng: upstream` leaves the
module as it is (upstream's unseeded behaviour, for comparison); the manifest records which was used.

Light core: runs in RoboTwin's interpreter (Python 3.10).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from evalwf.common.errors import ConfigError

# One episode's texts as upstream's generate_episode_descriptions returns them: instruction type -> its texts.
InstructionTexts = dict[str, list[str]]

SEEDED = "seeded"
UPSTREAM = "upstream"
RNG_MODES = (SEEDED, UPSTREAM)


def instruction_seed(task: str, env_seed: int) -> int:
    """The private generator's seed for an episode: a hash of the task and the episode's env seed (64 bits), so it
    depends on nothing else (not on the order of episodes, the batch or what ran before in the process)."""
    digest = hashlib.sha256(f"robotwin-instructions\0{task}\0{int(env_seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@contextlib.contextmanager
def private_random(generate: Callable[..., Any], seed: int) -> Iterator[random.Random]:
    """While inside, the module defining `generate` sees `random` as a private random.Random(seed)."""
    module = sys.modules.get(getattr(generate, "__module__", "") or "")
    if module is None or getattr(module, "random", None) is not random:
        where = getattr(module, "__file__", None) or getattr(generate, "__module__", "?")
        raise ConfigError(
            f"{where}: its generate_episode_descriptions does not draw through `import random` (module attribute "
            "`random`), so its texts cannot be drawn from a private seeded generator; set "
            "benchmarks.robotwin.instruction_rng: upstream to use its own unseeded draws"
        )
    rng = random.Random(seed)
    module.random = rng  # type: ignore[attr-defined]
    try:
        yield rng
    finally:
        module.random = random  # type: ignore[attr-defined]


def episode_descriptions(
    generate: Callable[..., list[InstructionTexts]],
    task: str,
    info: dict[str, Any],
    list_length: int,
    *,
    env_seed: int,
    rng: str,
) -> tuple[list[InstructionTexts], int | None]:
    """generate(task, [info], list_length) as upstream calls it, and the private seed used (None: upstream's)."""
    if rng == UPSTREAM:
        return generate(task, [info], list_length), None
    if rng != SEEDED:
        raise ConfigError(f"benchmarks.robotwin.instruction_rng: {rng!r} is not one of {', '.join(RNG_MODES)}")
    seed = instruction_seed(task, env_seed)
    with private_random(generate, seed):
        return generate(task, [info], list_length), seed
