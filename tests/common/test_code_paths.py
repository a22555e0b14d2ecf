"""Code (configs, Snakefiles, rule files) is read only from files no other user can change (DESIGN invariant 6):
evalwf.common.code_paths, applied where configs are loaded and where a worker takes a task's code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO, standin_config, write_config

from evalwf.common.code_paths import code_path_refusal
from evalwf.common.errors import ConfigError
from evalwf.contract.allowed_files import snakefile_refusal
from evalwf.plan.config import load_config

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def private_dir(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True)
    path.chmod(mode)
    return path


def config_in(directory: Path) -> Path:
    path = write_config(directory / "campaign.yaml", standin_config(directory))
    path.chmod(0o644)
    return path


def test_a_file_in_a_private_directory_is_code(tmp_path):
    assert code_path_refusal(config_in(private_dir(tmp_path / "mine")), "config file") is None
    assert code_path_refusal(REPO / "workflow" / "Snakefile", "Snakefile") is None


def test_a_file_in_a_directory_others_can_write_is_refused_naming_it(tmp_path):
    drop = private_dir(tmp_path / "config" / "drop", 0o777)
    refusal = code_path_refusal(config_in(drop), "config file")
    assert refusal is not None and f"its directory {drop} is writable by other users (mode 0777)" in refusal
    assert f"chmod g-w,o-w {drop}" in refusal
    group = private_dir(tmp_path / "group", 0o770)
    assert "writable by other users (mode 0770)" in code_path_refusal(config_in(group), "config file")


def test_a_sticky_shared_directory_is_fine_above_a_private_one_but_not_as_the_file_s_own(tmp_path):
    """/tmp's case: others cannot rename what they do not own there, so a private directory in it holds code; a
    file directly in it does not count as code."""
    shared = private_dir(tmp_path / "shared", 0o1777)
    assert code_path_refusal(config_in(private_dir(shared / "mine")), "config file") is None
    refusal = code_path_refusal(config_in(shared), "config file")
    assert refusal is not None and "(sticky, but it is the file's own directory)" in refusal


def test_a_file_others_can_write_is_refused(tmp_path):
    path = config_in(private_dir(tmp_path / "mine"))
    path.chmod(0o666)
    assert "it is writable by other users (mode 0666" in code_path_refusal(path, "config file")


@as_root
def test_a_file_or_link_of_another_user_is_refused(tmp_path):
    mine = private_dir(tmp_path / "mine")
    theirs = config_in(mine)
    os.chown(theirs, NOBODY, NOBODY)
    assert "belongs to" in code_path_refusal(theirs, "config file") and "uid 65534" in code_path_refusal(
        theirs, "config file"
    )
    ok = config_in(private_dir(tmp_path / "ok"))
    link = mine / "link.yaml"
    link.symlink_to(ok)
    os.lchown(link, NOBODY, NOBODY)
    assert f"the symbolic link {link} on its path belongs to" in code_path_refusal(link, "config file")


def test_loading_a_config_from_a_directory_others_can_write_fails_naming_the_file(tmp_path):
    drop = private_dir(tmp_path / "config" / "drop", 0o777)
    path = config_in(drop)
    with pytest.raises(ConfigError, match=f"config file {path} is refused: its directory {drop} is writable"):
        load_config(path)


def test_the_snakefile_is_only_a_workflow_s_own_and_its_rule_files_are_checked(tmp_path):
    workflow = shutil.copytree(REPO / "workflow", tmp_path / "wf" / "workflow")
    assert snakefile_refusal(str(workflow / "Snakefile")) is None
    planted = workflow / "drop" / "evil.smk"
    planted.parent.mkdir()
    planted.write_text((workflow / "Snakefile").read_text())
    assert "workers run only a workflow's own workflow/Snakefile" in snakefile_refusal(str(planted))
    rules = workflow / "rules"
    rules.chmod(0o777)
    refusal = snakefile_refusal(str(workflow / "Snakefile"))
    assert refusal is not None and refusal.startswith(f"rule file {rules / 'common.smk'} is refused: its directory")
    rules.chmod(0o755)
    (workflow / "Snakefile").write_text('include: "../../outside.smk"\n')
    assert "is not inside" in snakefile_refusal(str(workflow / "Snakefile"))
