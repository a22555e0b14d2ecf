"""evalwf.policy.template serves an OpenVLA-style predict(image, instruction) policy in the openpi protocol."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO, write_config

from evalwf.cli.policy_check import main as policy_check
from evalwf.contract.loopback import free_port
from evalwf.policy.client import PolicyClient, PolicyServerError, check_endpoint

MY_POLICY = '''
import numpy as np

class MyVLA:
    """What a researcher has: predict(image HxWx3 uint8, instruction) -> one 7-DoF action."""
    action_dim = 7

    def predict(self, image, instruction):
        if "explode" in instruction:
            raise RuntimeError("the checkpoint cannot do that")
        assert image.ndim == 3 and image.shape[-1] == 3, image.shape
        action = np.zeros(7)
        action[0] = image.mean() / 255.0
        action[1] = len(instruction)
        action[2:4] = image.shape[:2]
        return action

def load():
    return MyVLA()
'''


@pytest.fixture
def policy_dir(tmp_path):
    (tmp_path / "my_vla.py").write_text(textwrap.dedent(MY_POLICY))
    return tmp_path


def serve(policy_dir, *args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "evalwf.policy.template", "--port", str(port), "--policy", "my_vla:load", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{policy_dir}{os.pathsep}{REPO}"},
    )
    url = f"ws://127.0.0.1:{port}"
    check_endpoint(url, timeout_s=30)
    return process, url


def test_libero_and_robotwin_formats_and_errors(policy_dir):
    process, url = serve(policy_dir)
    try:
        with PolicyClient(url) as client:
            assert client.metadata == {"policy": "my_vla:load", "action_dim": 7, "repeat": 5}
            image = np.full((224, 224, 3), 51, np.uint8)
            actions = client.infer({"observation/image": image, "observation/state": np.zeros(8), "prompt": "abc"})[
                "actions"
            ]
            assert actions.shape == (5, 7) and actions.dtype == np.float32
            assert np.allclose(actions[:, :4], [0.2, 3, 224, 224])
            with pytest.raises(PolicyServerError, match="the checkpoint cannot do that"):
                client.infer({"observation/image": image, "prompt": "explode"})
    finally:
        process.terminate()
        process.wait(10)
    process, url = serve(policy_dir, "--image-key", "images.cam_high", "--repeat", "50")
    try:
        with PolicyClient(url) as client:  # RoboTwin's openpi format: nested CHW images
            chw = np.zeros((3, 240, 320), np.uint8)
            reply = client.infer({"images": {"cam_high": chw}, "state": np.zeros(14), "prompt": "click the bell"})
            assert reply["actions"].shape == (50, 7) and np.allclose(reply["actions"][0, 1:4], [14, 240, 320])
    finally:
        process.terminate()
        process.wait(10)


def test_policy_check_passes_for_the_template_serving_libero(policy_dir, tmp_path, capsys):
    command = "{python} -m evalwf.policy.template --port {port} --policy my_vla:load"
    config = {
        "run": "template",
        "results_dir": str(tmp_path / "results"),
        "policy": {"name": "my-vla", "command": command, "env": {"PYTHONPATH": f"{policy_dir}:{REPO}"}},
        "benchmarks": {"libero": {"suites": {"libero_spatial": [0]}, "episodes_per_task": 1, "batch_size": 1}},
    }
    assert policy_check(["--configfile", str(write_config(tmp_path / "c.yaml", config))]) == 0
    assert "actions: float32[5, 7]; libero expects [horizon >= 5, 7]" in capsys.readouterr().out
