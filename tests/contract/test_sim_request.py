"""The simulator step's request (evalwf.contract.sim_request): what the job body writes is what the simulator step
reads, in the workflow's interpreter and in a benchmark's Python 3.10 one; a malformed request is refused naming
the field."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import REPO
from lightenv import py310_python

from evalwf.contract.sim_request import (
    BatchRequest,
    ExternalServer,
    ManifestRequest,
    StopIfDropped,
    request_from_data,
    request_from_json,
)

BATCH = BatchRequest(
    run="r",
    benchmark="standin",
    suite="alpha",
    task="reach",
    episode_start=4,
    episode_count=2,
    section={"episodes_per_task": 6, "suites": {"alpha": ["reach"]}, "python": None},
    manifest_path="/m/reach.0123456789abcdef.json",
    manifest_hash="0123456789abcdef",
    endpoint="ws://127.0.0.1:9000",
    infer_timeout_s=30.0,
    policy_identity="p-0123",
    output="/b/0004-2.json",
    artifacts_dir="/a",
    server_process="123:456",
    policy_server=ExternalServer(url="ws://h:1", metadata_digest="abc"),
    video_dir="/b/videos",
    stop_if_dropped=StopIfDropped("p", ["/c/rounds/round-0.json"]),
)
MANIFEST = ManifestRequest(
    benchmark="standin", definition={"seeds": [1, 2]}, scope="alpha", task="reach", section={}, output="/m.json"
)


def test_both_requests_come_back_as_they_were_written():
    for request in (BATCH, MANIFEST):
        assert request_from_json(request.to_json()) == request
    assert json.loads(BATCH.to_json())["kind"] == "batch" and json.loads(MANIFEST.to_json())["kind"] == "manifest"
    assert request_from_json(MANIFEST.to_json()).cache_dir is None  # optional fields left out are None
    written = json.loads(BATCH.to_json())
    del written["video_dir"], written["server_process"], written["policy_server"], written["stop_if_dropped"]
    assert request_from_data(written) == BatchRequest(**{**vars(BATCH), "video_dir": None, "server_process": None,
                                                         "policy_server": None, "stop_if_dropped": None})  # fmt: skip


def test_an_integer_timeout_is_a_float_and_nothing_else_is_converted():
    written = {**json.loads(BATCH.to_json()), "infer_timeout_s": 30}
    timeout = request_from_data(written).infer_timeout_s  # type: ignore[union-attr]
    assert timeout == 30.0 and isinstance(timeout, float)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"episode_start": "4"}, "'episode_start'"),
        ({"episode_count": True}, "'episode_count'"),
        ({"infer_timeout_s": None}, "'infer_timeout_s'"),
        ({"section": ["a"]}, "'section'"),
        ({"policy_server": {"url": "ws://h:1"}}, "'policy_server'"),
        ({"policy_server": {"url": 1, "metadata_digest": "x"}}, "'policy_server'"),
        ({"video_dir": 3}, "'video_dir'"),
        ({"stop_if_dropped": {"policy": "p", "decisions": "/c/round-0.json"}}, "'stop_if_dropped'"),
        ({"stop_if_dropped": {"policy": "p"}}, "'stop_if_dropped'"),
        ({"output": None}, "'output'"),
        ({"episode_range": [0, 2]}, "'episode_range'"),  # an unknown field, not silently ignored
    ],
)
def test_a_malformed_batch_request_is_refused_naming_the_field(change, named):
    with pytest.raises(ValueError, match="batch request: .*" + named):
        request_from_data({**json.loads(BATCH.to_json()), **change})


def test_a_missing_field_a_wrong_kind_or_no_object_is_refused():
    written = json.loads(MANIFEST.to_json())
    del written["definition"]
    with pytest.raises(ValueError, match="manifest request: field 'definition' is missing"):
        request_from_data(written)
    with pytest.raises(ValueError, match="unknown request kind 'nope'; known: batch, manifest"):
        request_from_data({"kind": "nope"})
    with pytest.raises(ValueError, match="JSON object, not list"):
        request_from_data([MANIFEST.to_json()])


def test_the_simulator_s_python_3_10_reads_the_request_the_workflow_wrote():
    """The same class on both sides: the 3.10 interpreter (numpy 1.26, no Snakemake) parses the workflow side's
    JSON into the same request and writes it back byte for byte."""
    code = (
        "import sys; from evalwf.contract.sim_request import request_from_json; "
        "request = request_from_json(sys.stdin.read()); print(type(request).__name__); print(request.to_json())"
    )
    done = subprocess.run(
        [str(py310_python()), "-c", code], input=BATCH.to_json(), capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    name, text = done.stdout.splitlines()
    assert name == "BatchRequest" and text == BATCH.to_json()
