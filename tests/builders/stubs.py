"""Run a rendered job script for real with bash, with the launchers and container runtimes replaced by stubs that
record the argv they were given (NUL-separated), so tests see exactly what the application would receive."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# srun/mpirun stubs drop their own options and run the rest, as the real launchers do on each task.
_STUBS = {
    "srun": 'while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n',
    "mpirun": 'while [ $# -gt 0 ]; do case "$1" in -np|-hostfile) shift 2 ;; *) break ;; esac; done\nexec "$@"\n',
    "singularity": 'printf "%s\\0" "$@" > "$ARGV_OUT"\nprintf "%s" "${CHECK_ENV:+${!CHECK_ENV}}" > "$ENV_OUT"\n',
    "docker": 'printf "%s\\0" "$@" > "$ARGV_OUT"\n',
}


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stderr: str
    argv: list[str]
    env_value: str
    workdir: Path


def run_script(text: str, tmp_path: Path, extra_args: tuple[str, ...] = (), check_env: str = "",
               container: str | None = None, extra_env: dict[str, str] | None = None) -> ScriptRun:
    """Write ``text`` to ``tmp_path/job`` and run it with bash from ``tmp_path`` with stubbed tools on PATH.

    ``container`` sets APPOPT_CONTAINER (else the script picks from what PATH has: the stubs, and this machine's
    own podman or ch-run, when present); ``extra_env`` adds variables."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in _STUBS.items():
        stub = bin_dir / name
        stub.write_text("#!/bin/bash\n" + body)
        stub.chmod(0o755)
    (tmp_path / "nodes").write_text("node1\nnode2\n")
    script = tmp_path / "job"
    script.write_text(text, encoding="utf-8")
    argv_out, env_out = tmp_path / "argv.out", tmp_path / "env.out"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "ARGV_OUT": str(argv_out),
        "ENV_OUT": str(env_out),
        "CHECK_ENV": check_env,
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "PBS_O_WORKDIR": str(tmp_path),
        "PBS_NODEFILE": str(tmp_path / "nodes"),
        **({"APPOPT_CONTAINER": container} if container is not None else {}),
        **(extra_env or {}),
    }
    done = subprocess.run(
        ["bash", str(script), *extra_args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    argv = argv_out.read_bytes().decode().split("\0")[:-1] if argv_out.exists() else []
    env_value = env_out.read_bytes().decode() if env_out.exists() else ""  # bytes: keep "\r" as is
    return ScriptRun(done.returncode, done.stderr, argv, env_value, tmp_path)


def bash_syntax_ok(text: str) -> None:
    """``bash -n`` over the script (raises with bash's message when it does not parse)."""
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
