"""The server side of the openpi websocket protocol, shared by every policy server this project ships (the
stand-in's, the `evalwf serve` template): its metadata first, then one msgpack reply per observation frame; a
failing inference sends the traceback and closes with 1011 (as openpi's server); GET /healthz answers 200 (what
readiness checks ask).

Batching: a worker's job slots share one policy server, and the accelerator behind it does one forward pass at a
time, so requests answered one by one leave it idle between slots. With `max_batch` > 1 and a policy that has
`infer_batch(observations) -> replies`, concurrent requests from all connections are gathered (up to `max_batch`,
for at most `max_wait_ms` after the first one, or until every connection it expects has a request in: see
RequestBatcher) and answered by one call; each reply goes back to its own connection. A failing batch is retried
item by item, so a bad request fails only its own episode. Without `infer_batch` (or with max_batch 1) each
request is answered alone.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from evalwf.policy import wire as msgpack_numpy
from evalwf.policy.wire import Message

# Set by a worker for the policy server it starts (its --slots, or the policy block's max_batch; max_wait_ms): the
# defaults of --max-batch / --max-wait-ms of the servers this project ships.
MAX_BATCH_ENV = "EVALWF_POLICY_MAX_BATCH"
MAX_WAIT_MS_ENV = "EVALWF_POLICY_MAX_WAIT_MS"


def add_batching_options(parser: argparse.ArgumentParser) -> None:
    """--max-batch and --max-wait-ms, defaulting to what the worker that starts the server sets (else no batching,
    and the policy block's default wait)."""
    from evalwf.policy.schema import policy_defaults

    default_wait = float(policy_defaults()["max_wait_ms"])
    batch, wait = os.environ.get(MAX_BATCH_ENV), os.environ.get(MAX_WAIT_MS_ENV)
    parser.add_argument(
        "--max-batch",
        type=int,
        default=int(batch) if batch else 1,
        help=f"most requests answered by one infer_batch call (default ${MAX_BATCH_ENV}, else 1: no batching)",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=float(wait) if wait else default_wait,
        help=f"longest wait for more requests after a batch's first (default ${MAX_WAIT_MS_ENV}, "
        f"else {default_wait:g})",
    )


def health_check(connection: ServerConnection, request: Request) -> Response | None:
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


@dataclass
class _Pending:
    connection: int  # which connection asked (each has at most one request in flight: openpi clients wait)
    observation: Message
    reply: asyncio.Future[Message]
    received: float = field(default_factory=time.monotonic)


class RequestBatcher:
    """Gathers requests of all connections into batches for one `infer_batch` call at a time (one forward pass at a
    time, as on one accelerator).

    A batch closes when it holds `max_batch` requests, when `max_wait_ms` have passed since its first request, or as
    soon as every connection it expects has a request in it: the connections of the previous batch (they just got
    their replies and are stepping their simulators) and those already queued. So slots that came back together
    stay in one batch forward pass after forward pass, a slot that is resetting its environment (not in the last
    batch) holds nobody up, and a single slot never waits. (Slots split over two batches can stay split: expecting
    the last two batches' connections rejoins them, but measured slower on scripts/bench_batching.py, where resets
    are frequent.)"""

    def __init__(self, policy: Any, max_batch: int, max_wait_ms: float):
        self.policy = policy
        self.on_reply: Callable[[Message], None] | None = None
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max(0.0, float(max_wait_ms)) / 1000.0
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self.previous: set[int] = set()  # connections of the last batch answered

    async def infer(self, connection: int, observation: Message) -> Message:
        pending = _Pending(connection, observation, asyncio.get_running_loop().create_future())
        await self.queue.put(pending)
        return await pending.reply

    def forget(self, connection: int) -> None:
        """A closed connection is expected no more."""
        self.previous.discard(connection)

    async def gather(self) -> tuple[list[_Pending], str]:
        """The next batch and what closed it: "max_batch", "all_expected" (every connection it waits for is in) or
        "max_wait" (the deadline passed first; a user tuning max_wait_ms reads how often in server_timing)."""
        batch = [await self.queue.get()]
        deadline = time.monotonic() + self.max_wait_s
        closed_by = "max_batch"
        while len(batch) < self.max_batch:
            while len(batch) < self.max_batch and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            if len(batch) >= self.max_batch:
                break
            if self.previous <= {p.connection for p in batch}:
                closed_by = "all_expected"
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                closed_by = "max_wait"
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), remaining))
            except asyncio.TimeoutError:  # noqa: UP041 (Python 3.10: simulator interpreters)
                closed_by = "max_wait"
                break
        self.previous = {p.connection for p in batch}
        return batch, closed_by

    async def run(self) -> None:
        while True:
            await self._answer(*await self.gather())

    async def _answer(self, batch: list[_Pending], closed_by: str = "alone") -> None:
        started = time.monotonic()
        try:
            replies = await asyncio.to_thread(self.policy.infer_batch, [p.observation for p in batch])
            if len(replies) != len(batch):
                raise ValueError(f"infer_batch returned {len(replies)} replies for {len(batch)} observations")
        except Exception:
            if len(batch) == 1:
                _settle(batch[0], error=traceback.format_exc())
                return
            for pending in batch:  # isolate the failing request: each alone
                await self._answer([pending])
            return
        elapsed_ms = 1000 * (time.monotonic() - started)
        for pending, reply in zip(batch, replies, strict=True):
            timing = {
                "infer_ms": elapsed_ms,
                "batch_size": len(batch),
                "queue_ms": 1000 * (started - pending.received),
                "closed_by": closed_by,
            }
            if self.on_reply is not None:
                self.on_reply(timing)
            _settle(pending, reply={**reply, "server_timing": timing})


def _settle(pending: _Pending, reply: Message | None = None, error: str | None = None) -> None:
    if pending.reply.done():  # its connection went away meanwhile
        return
    if error is not None:
        pending.reply.set_exception(_InferenceFailed(error))
    else:
        pending.reply.set_result(reply or {})


class _InferenceFailed(Exception):
    """The policy raised for this request; the text is its traceback."""


def batching_enabled(policy: Any, max_batch: int) -> bool:
    return max_batch > 1 and callable(getattr(policy, "infer_batch", None))


async def serve_policy(
    policy: Any,
    host: str,
    port: int,
    metadata: Message,
    banner: str,
    *,
    max_batch: int,
    max_wait_ms: float,
    on_reply: Callable[[Message], None] | None = None,
) -> None:
    """Serve `policy.infer(observation) -> reply dict` (and `infer_batch`, see the module docstring) until
    cancelled; `banner` is printed once listening. `on_reply` sees each reply's server timing (infer_ms,
    queue_ms, batch_size, closed_by): for measurements."""
    batcher = RequestBatcher(policy, max_batch, max_wait_ms) if batching_enabled(policy, max_batch) else None
    if batcher is not None:
        batcher.on_reply = on_reply

    async def answer(connection: int, observation: Message) -> Message:
        if batcher is not None:
            return await batcher.infer(connection, observation)
        started = time.monotonic()
        try:
            reply = await asyncio.to_thread(policy.infer, observation)
        except Exception:
            raise _InferenceFailed(traceback.format_exc()) from None
        timing = {
            "infer_ms": 1000 * (time.monotonic() - started),
            "batch_size": 1,
            "queue_ms": 0.0,
            "closed_by": "alone",
        }
        if on_reply is not None:
            on_reply(timing)
        return {**reply, "server_timing": timing}

    async def handler(connection: ServerConnection) -> None:
        try:
            await connection.send(msgpack_numpy.packb(metadata))
            while True:
                try:
                    frame = await connection.recv()
                except ConnectionClosed:
                    return
                try:
                    data = msgpack_numpy.packb(await answer(id(connection), msgpack_numpy.unpackb(frame)))
                except Exception as error:
                    text = str(error) if isinstance(error, _InferenceFailed) else traceback.format_exc()
                    await connection.send(text)
                    await connection.close(code=1011, reason="internal error")
                    return
                await connection.send(data)
        finally:
            if batcher is not None:
                batcher.forget(id(connection))

    async with serve(handler, host, port, compression=None, max_size=None, process_request=health_check) as server:
        worker = asyncio.create_task(batcher.run()) if batcher is not None else None
        print(banner, flush=True)
        try:
            await server.serve_forever()
        finally:
            if worker is not None:
                worker.cancel()
