"""Serve any Python policy in the openpi websocket protocol: a template to copy and edit.

    evalwf serve --policy my_package.my_module:load_policy --port 8000 [--max-batch 8 --max-wait-ms 5]

`--policy module:factory` names a function returning an object with one or both of

    predict(image, instruction[, rng]) -> action                  # one request
    predict_batch(images, instructions[, rngs]) -> actions        # several requests, one forward pass

(images: HxWx3 uint8 arrays; instructions: str; actions: a list, or an array with a leading batch axis). The
factory runs once, before the server listens (load the checkpoint there: `policy.startup_timeout_s` must cover
it). The default `evalwf.policy.template:ZeroPolicy` answers zeros, for trying the wiring.

Batching: with `predict_batch` and `--max-batch N` > 1, concurrent requests (a worker's job slots share this
server) are gathered for at most `--max-wait-ms` and answered by one predict_batch call (evalwf.policy.
serving); without predict_batch, or with --max-batch 1, each request gets its own predict call. A worker
sets EVALWF_POLICY_MAX_BATCH (its --slots, or the policy block's max_batch) and EVALWF_POLICY_MAX_WAIT_MS for the
server it starts: they are the defaults of the two options.

Randomness: a policy whose predict / predict_batch takes `rng` / `rngs` gets one numpy Generator per request,
derived from the episode and step the request belongs to (evalwf.policy.episode_identity): a sampling policy
gives the same records whatever the batch size, slot count or batching, as long as it draws only from that rng.

Per request (one msgpack frame) the server takes the image and instruction out of the benchmark's observation
(`--image-key`, default "observation/image" as LIBERO's openpi format; RoboTwin's default format nests
"images" -> "cam_high", reachable as `--image-key images.cam_high`, CHW there), and answers {"actions": [H, A]}:
one action becomes a chunk of one, repeated `--repeat` times when the benchmark executes several actions per call
(LIBERO replan_steps 5: `--repeat 5`, or lower replan_steps in the config). On connect it sends its metadata
({"policy": <factory>, "action_dim", ...}); an exception is answered with the traceback as a text frame, as
openpi's server does. HTTP GET /healthz answers OK. Check it with `evalwf policy check`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
from typing import Any

import numpy as np

from evalwf.common.observations import lookup_path
from evalwf.policy.episode_identity import request_rng
from evalwf.policy.serving import add_batching_options, serve_policy
from evalwf.policy.wire import Message


class ZeroPolicy:
    """The smallest OpenVLA-style policy: predict(image, instruction) -> a 7-value action (keeps the gripper open)."""

    action_dim = 7

    def predict(self, image: np.ndarray, instruction: str) -> np.ndarray:
        action = np.zeros(self.action_dim, dtype=np.float32)
        action[-1] = -1.0
        return action


def load_policy(spec: str) -> Any:
    """'package.module:factory' -> factory() (a class or a function)."""
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"--policy {spec!r}: expected 'module:factory'")
    return getattr(importlib.import_module(module_name), attribute)()


def lookup(observation: Message, key: str) -> Any:
    """A request key, or a dotted path into nested dicts ('images.cam_high')."""
    if key in observation:
        return observation[key]
    return lookup_path(observation, key, f"the observation (keys {sorted(observation)})")


def _takes(function: Any, name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


class PredictAdapter:
    """openpi's infer(observation) -> {"actions"} (and infer_batch, when the policy has predict_batch) on top of
    predict(image, instruction) / predict_batch(images, instructions)."""

    def __init__(self, policy: Any, image_key: str, prompt_key: str, repeat: int):
        self.policy, self.image_key, self.prompt_key, self.repeat = policy, image_key, prompt_key, repeat
        predict = getattr(policy, "predict", None)
        self.predict = predict if callable(predict) else None
        predict_batch = getattr(policy, "predict_batch", None)
        if self.predict is None and not callable(predict_batch):
            raise TypeError(f"{type(policy).__name__} has neither predict(image, instruction) nor predict_batch")
        if callable(predict_batch):
            self.predict_batch = predict_batch
            self.infer_batch = self._infer_batch  # what the server looks for to batch requests
        self.predict_rng = self.predict is not None and _takes(self.predict, "rng")
        self.batch_rngs = callable(predict_batch) and _takes(predict_batch, "rngs")

    def _inputs(self, observation: Message) -> tuple[np.ndarray, str]:
        image = np.asarray(lookup(observation, self.image_key))
        if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
            image = np.transpose(image, (1, 2, 0))  # CHW (RoboTwin's openpi format) -> HWC
        return image, str(observation.get(self.prompt_key, ""))

    def _reply(self, action: Any) -> Message:
        chunk = np.asarray(action, dtype=np.float32)
        chunk = chunk.reshape(1, -1) if chunk.ndim == 1 else chunk
        return {"actions": np.repeat(chunk, self.repeat, axis=0) if chunk.shape[0] == 1 else chunk}

    def infer(self, observation: Message) -> Message:
        if self.predict is None:
            return self._infer_batch([observation])[0]
        image, instruction = self._inputs(observation)
        if self.predict_rng:
            return self._reply(self.predict(image, instruction, rng=request_rng(observation)))
        return self._reply(self.predict(image, instruction))

    def _infer_batch(self, observations: list[Message]) -> list[Message]:
        images, instructions = zip(*(self._inputs(o) for o in observations), strict=True)
        if self.batch_rngs:
            rngs = [request_rng(o) for o in observations]
            actions = self.predict_batch(list(images), list(instructions), rngs=rngs)
        else:
            actions = self.predict_batch(list(images), list(instructions))
        if len(actions) != len(observations):
            raise ValueError(f"predict_batch returned {len(actions)} actions for {len(observations)} requests")
        return [self._reply(action) for action in actions]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalwf serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other machines (policy.url)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--policy", default="evalwf.policy.template:ZeroPolicy", help="module:factory")
    parser.add_argument("--image-key", default="observation/image")
    parser.add_argument("--prompt-key", default="prompt")
    parser.add_argument("--repeat", type=int, default=5, help="chunk length made from one predicted action")
    add_batching_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"loading policy {args.policy}", flush=True)
    policy = load_policy(args.policy)
    adapter = PredictAdapter(policy, args.image_key, args.prompt_key, args.repeat)
    batched = args.max_batch > 1 and hasattr(adapter, "infer_batch")
    metadata = {
        "policy": args.policy,
        "action_dim": getattr(policy, "action_dim", None),
        "repeat": args.repeat,
    }
    banner = f"policy server listening on ws://{args.host}:{args.port}"
    banner += f" (batches of up to {args.max_batch}, {args.max_wait_ms:g} ms)" if batched else " (no batching)"
    try:
        asyncio.run(
            serve_policy(
                adapter,
                args.host,
                args.port,
                metadata,
                banner,
                max_batch=args.max_batch,
                max_wait_ms=args.max_wait_ms,
            )
        )
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
