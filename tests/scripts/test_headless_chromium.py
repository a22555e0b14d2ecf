"""The headless Chromium the report tests drive (scripts/headless_chromium.py): when its context ends, no process of
that browser is left and its profile directory is gone. Only the main process was stopped: its helpers (zygote,
renderers, crash handler) could still write into the profile while it was being removed ("Directory not empty")."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from scriptkit import load_script

CHROMIUM = load_script("headless_chromium")


def browser_processes() -> dict[int, str]:
    """Live (not zombie) processes whose command line names a chromium profile made by the script."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "chromium-profile-" in cmdline and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def test_the_browser_leaves_no_process_and_no_profile_behind():
    if CHROMIUM.find_chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium: make test-tools installs Debian's chromium package")
        pytest.skip("no chromium on PATH (make test-tools installs Debian's chromium package)")
    before = set(browser_processes())
    with CHROMIUM._browser(320, 240) as page:
        assert page.evaluate("1 + 1") == 2
        ours = {pid: cmdline for pid, cmdline in browser_processes().items() if pid not in before}
    assert len(ours) > 1, f"the browser runs helper processes: {ours}"
    profiles = {
        part.split("=", 1)[1] for cmdline in ours.values() for part in cmdline.split() if "--user-data-dir=" in part
    }
    left = {pid: cmdline for pid, cmdline in browser_processes().items() if pid in ours}
    assert not left, f"still running after the browser's context ended: {left}"
    assert profiles and not any(Path(profile).exists() for profile in profiles), profiles


def test_stopping_the_browser_stops_a_helper_that_ignores_sigterm(tmp_path):
    """What made the profile's removal fail, made certain: a helper that outlives its main process and keeps
    writing into the profile (here one that ignores SIGTERM)."""
    profile = tmp_path / "profile"
    profile.mkdir()
    started = tmp_path / "helper.pid"
    script = (
        '(trap \'\' TERM; echo $BASHPID > "$2"; while true; do touch "$1/Default-$RANDOM"; sleep 0.01; done) & wait'
    )
    process = CHROMIUM.start_browser(["bash", "-c", script, "browser", str(profile), str(started)])
    try:
        deadline = time.monotonic() + 10
        while not (started.exists() and started.read_text().strip()):
            assert time.monotonic() < deadline, "the helper did not start"
            time.sleep(0.05)
        helper = int(started.read_text())
        CHROMIUM.stop_browser(process)
        time.sleep(0.2)
        state = Path(f"/proc/{helper}/stat")
        alive = state.exists() and state.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    finally:  # a failing run leaves no helper behind (it ignores SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not alive, "a helper of the browser still runs after stop_browser"
    shutil.rmtree(profile)  # nothing writes into it any more
