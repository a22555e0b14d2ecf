"""tests/ mirrors the source: one folder per part, so the tests of a module are found where its name says
(docs/test-suite.md, "Where a test goes")."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# Folders that are not an evalwf part: the executor plugin, the Snakemake workflow, each benchmark folder, the
# scripts/ commands, and the repository-wide checks (layering, the light core, the suite's own order).
OTHER_PARTS = {
    "plugin": REPO / "snakemake_executor_plugin_labtasker",
    "workflow": REPO / "workflow",
    "benchmarks": REPO / "benchmarks",
    "scripts": REPO / "scripts",
    "layout": REPO,
}


def test_every_test_folder_is_named_after_a_part_of_the_source() -> None:
    evalwf_parts = {p.name for p in (REPO / "evalwf").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    strays = sorted(folders - evalwf_parts - OTHER_PARTS.keys())
    assert not strays, f"tests/{strays[0]} names no part of the source: move its tests to the part they test"


def test_each_benchmark_test_folder_names_a_benchmark() -> None:
    benchmarks = {p.name for p in (REPO / "benchmarks").iterdir() if (p / "adapter.py").is_file()}
    folders = {p.name for p in (TESTS / "benchmarks").iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders <= benchmarks, f"tests/benchmarks/{sorted(folders - benchmarks)} names no benchmark"


def test_test_file_names_are_unique_across_folders() -> None:
    """pytest's default import mode puts each test folder on sys.path: two files of one name would clash."""
    seen: dict[str, Path] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path
