"""evalwf demo (make demo, make demo-standin) without a queue: its own steps, with the processes faked."""

from __future__ import annotations

from conftest import REPO

import evalwf.cli.demo


def _demo_module():
    return evalwf.cli.demo


def test_demo_standin_with_a_relative_config(monkeypatch, capsys):
    """`make demo-standin` passes config/standin.yaml (relative): the demo used to finish the run, then crash in
    relative_to and exit 2. Its workers find the embedded server and its token themselves (no --url, which would
    leave them without the token)."""
    demo = _demo_module()
    started, calls = [], []

    class FakeWorkers:
        def __init__(self, argv, **kwargs):
            started.append(argv)

        def stop(self, timeout_s):
            pass

    monkeypatch.setattr(demo, "GuardedProcess", FakeWorkers)
    monkeypatch.setattr(demo, "ensure_embedded_server", lambda root: "http://127.0.0.1:1")
    monkeypatch.setattr(demo.subprocess, "call", lambda argv, cwd: calls.append(argv) or 0)
    monkeypatch.chdir(REPO)
    assert demo.main(["config/standin.yaml"]) == 0
    assert "--url" not in started[0]
    assert started[0][-2:] == ["--configfile", str(REPO / "config" / "standin.yaml")], "the policy loads at start"
    assert calls[0][-2:] == ["--configfile", str(REPO / "config" / "standin.yaml")]
    assert "--configfile config/standin.yaml --report results/standin-demo/report.html" in capsys.readouterr().out


def test_demo_says_what_its_zero_percent_means_and_where_a_real_policy_goes(monkeypatch, capsys):
    """`make demo` ends in 0/4 successes: its last lines say why (the stand-in policy, LIBERO's horizon cut to 20
    steps) and point to the README section on plugging in a real policy (which exists)."""
    demo = _demo_module()
    monkeypatch.setattr(demo, "GuardedProcess", lambda argv, **kwargs: type("W", (), {"stop": lambda *a, **k: None})())
    monkeypatch.setattr(demo, "ensure_embedded_server", lambda root: "http://127.0.0.1:1")
    monkeypatch.setattr(demo.subprocess, "call", lambda argv, cwd: 0)
    monkeypatch.chdir(REPO)
    assert demo.main([]) == 0
    tail = capsys.readouterr().out.strip().splitlines()[-3:]
    assert tail[0].startswith("demo: what the success rates mean, per config/demo.yaml")
    assert "the policy is the stand-in" in tail[0] and "horizon is cut to 20 steps (openpi allows" in tail[0]
    assert "0 % is expected" in tail[0]
    assert 'README.md "Evaluate your own policy"' in tail[2]
    assert "\n## Evaluate your own policy\n" in (REPO / "README.md").read_text()
