"""The README's test command is what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci_lines = [
        line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    # the README's command comes first (after ``cd``); the CPython 3.13 job follows it
    command = next(line for line in ci_lines if "pytest" in line).strip()
    assert command in (ROOT / "README.md").read_text()
    assert "pytest" in command and "-c constraints.txt" in command
