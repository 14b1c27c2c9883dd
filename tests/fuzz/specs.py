"""Hostile application specs for ``appopt validate`` and ``appopt plan -o``, and the rule every outcome must obey.

Strategies (hypothesis) make YAML texts of four kinds: the shipped examples with mutated fields (huge or non-finite
numbers, wrong types, unicode, NUL, near-miss keys, long values, YAML tags and aliases); whole hostile documents
(alias bombs, recursive aliases, nesting thousands deep, 5,000-digit integers, thousands of unknown keys, YAML
punctuation soup); random structures under the spec's own keys; and raw bytes.

:func:`check_spec` runs ``validate`` and, when it passes, ``plan -o`` in-process through typer's CliRunner under a
10 s alarm and sorts the result into an :data:`OUTCOMES` class. Good classes: ``ok`` (both exit 0 and plan.json is
strict JSON), ``rejected`` (validate fails with one-line ``error:`` messages), ``no-route`` (validate passes and plan
says no route fits, exit 3). Everything else is a bug: ``traceback``, ``hang``, ``bad-message`` (a line that is not
``error: ...``, too long, or too many), ``plan-after-validate`` (validate passed but plan failed for another
reason), ``bad-plan-json``.

``python -m tests.fuzz spec --examples 10000`` prints the counts (see ``tests/fuzz/__main__.py``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders.schedulers import scheduler_names
from cli.main import app
from optimiser.errors import MAX_LINE_CHARS

EXAMPLES = Path(__file__).parents[2] / "examples"
#: A hang: the issue's bound for one spec.
HANG_SECONDS = 10
GOOD = ("ok", "rejected", "no-route")
BAD = ("traceback", "hang", "bad-message", "plan-after-validate", "bad-plan-json")
OUTCOMES = GOOD + BAD
#: Error lines one run may print: SpecError shows 20 plus "… and N more"; PlanError lists routes (at most 50 + 1).
MAX_ERROR_LINES = 51


# --- text building -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """A YAML token written into the text as is (a 5,000-digit literal, ``.inf``, ``*alias``, ``!!tag x``)."""

    token: str


def to_yaml(data: Any) -> str:
    """``data`` as YAML, with every :class:`Raw` written verbatim (PyYAML cannot even print a 5,000-digit int)."""
    raws: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.token)
            return f"RAWTOKEN{len(raws) - 1}X"
        if isinstance(value, dict):
            return {swap(k) if isinstance(k, Raw) else k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    text = yaml.safe_dump(swap(data), sort_keys=False, allow_unicode=True, width=10**9)
    for i in range(len(raws) - 1, -1, -1):  # RAWTOKEN1X before RAWTOKEN10X would clobber it: longest first
        text = text.replace(f"RAWTOKEN{i}X", raws[i])
    return text


def example_specs() -> list[dict[str, Any]]:
    """The shipped examples as data (the mutation bases)."""
    return [yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(EXAMPLES.glob("*.yaml"))]


#: Every field path of the spec, for mutations that set, delete or misspell one.
FIELD_PATHS: tuple[tuple[str, ...], ...] = (
    ("name",), ("application",), ("application", "type"), ("application", "model"),
    ("application", "model", "architecture"), ("application", "model", "onnx"), ("application", "batch_size"),
    ("application", "precision"), ("application", "framework"), ("application", "data"),
    ("application", "data", "path"), ("application", "data", "samples"), ("application", "data", "epochs"),
    ("application", "data", "input_shape"), ("application", "command"), ("application", "code"),
    ("target",), ("target", "platform"), ("target", "cpu"), ("target", "cpu", "arch"), ("target", "cpu", "model"),
    ("target", "cpu", "cores"), ("target", "accelerator"), ("target", "accelerator", "vendor"),
    ("target", "accelerator", "model"), ("target", "accelerator", "count"), ("target", "scheduler"),
    ("target", "nodes"), ("target", "partition"), ("target", "account"), ("target", "walltime"),
    ("target", "interconnect_gbps"), ("container",), ("container", "formats"), ("container", "registry"),
    ("container", "tag"), ("optimisation",), ("optimisation", "goal"), ("optimisation", "allow"),
    ("optimisation", "deny"), ("optimisation", "allow", "compilers"), ("optimisation", "deny", "libraries"),
    ("optimisation", "allow", "frameworks"), ("optimisation", "top"),
)

_NEAR_VALID = [
    "", " ", "gpu", "gpu,debug", "gpu,,x", "a b", "$(id)", "x;rm -rf /", "-p", "..", "../x", "/etc", "/dev/zero",
    "registry.example.org/team/app", "Registry.Example/App", "host:5000/a", "a:b:c", "a..b", "a/", "latest", "v1.0",
    "-bad", ".hidden", "01:00:00", "00:99:00", "99999-00:00:00", "1-1:00:00", "resnet50", "bert_base", "a100",
    "xeon-8380", "local", "a64fx", "onnxruntime", "pytorch", "tvm", "xla", "tensorrt", "mkl", "fp16", "NHWC",
    "digits_mlp.onnx", "train.py", "src", "model.onnx", "runtime", "x" * 300, "ünïcödé", "名前", "🚀", "a\tb",
    "slurm", "pbs", "kubernetes", "none", "nvidia", "amd", "intel", "training", "inference", "docker",
    "singularity", "throughput", "latency", "auto",
]
_RAW_TOKENS = [
    "9" * 41, "9" * 400, "9" * 4301, "-" + "9" * 5000, "0x" + "f" * 4000, "1_000_000_000_000_000_000_000",
    "1e309", "1.0e+309", "-1.0e+309", ".inf", "-.inf", ".nan", "1e300", "1.0e+300", "0.0", "-0.0", "1.5",
    "18446744073709551617", "2147483648", "190:20:30", "0o777", "0b" + "1" * 100,
    '"\\0"', '"a\\0b"', '"\\ud800"', '"a\\nb"', '"\\e[31mred"', "2020-13-45", "2001-12-14t21:59:43.10-05:00",
    "!!python/object:os.system [id]", "!!python/name:os.system", "!!binary zz", "!!binary aGk=", "!!float abc",
    "!!int abc", "!!set {a, b}", "!!omap [a: 1]", "!custom x", "*undefined", "&anchor 5", "~", "yes", "off",
    "<<", "? complex", "[[[[1]]]]", "{a: {b: {c: {}}}}", "|\n  multi\n  line", "'single ''quoted'''",
]


def _near_miss(key: str) -> st.SearchStrategy[str]:
    """Misspellings of ``key``: a letter dropped, doubled, swapped or replaced; another case; a trailing space."""
    n = len(key)
    edits: list[str] = [key.upper(), key.title(), key + " ", key + "s", key.replace("_", "-")]
    edits += [key[:i] + key[i + 1:] for i in range(n)] + [key[:i] + key[i] + key[i:] for i in range(n)]
    edits += [key[:i] + key[i + 1] + key[i] + key[i + 2:] for i in range(n - 1)]
    return st.sampled_from([e for e in edits if e != key] or [key + "x"])


def hostile_values() -> st.SearchStrategy[Any]:
    """Values for any field: right and wrong types, edge and absurd numbers, odd text, raw YAML tokens."""
    scalars = st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.integers(min_value=-3, max_value=300),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(_NEAR_VALID),
        st.text(max_size=24),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
        st.booleans(),
        st.none(),
        st.sampled_from(_RAW_TOKENS).map(Raw),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(_NEAR_VALID[:12]), inner, max_size=3)
        ),
        max_leaves=8,
    )


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = data
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _get_parent(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = data
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and path[-1] in node else None


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """A shipped example with one to four mutations: set a field, delete one, misspell one, add an unknown one."""
    data = draw(st.sampled_from(example_specs()))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(FIELD_PATHS))
        kind = draw(st.sampled_from(["set", "set", "set", "delete", "misspell", "unknown", "nest"]))
        parent = _get_parent(data, path)
        if kind == "set":
            _set(data, path, draw(hostile_values()))
        elif kind == "delete" and parent is not None:
            del parent[path[-1]]
        elif kind == "misspell" and parent is not None:
            parent[draw(_near_miss(path[-1]))] = parent.pop(path[-1])
        elif kind == "unknown":
            _set(data, (*path[:-1], draw(st.sampled_from(["colour", "extra", "batchsize", "gpus", "√"]))), 1)
        elif kind == "nest":
            depth = draw(st.sampled_from([3, 31, 40, 200, 1500]))
            opening, closing = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("[{a: ", "}]")]))
            _set(data, path, Raw(opening * depth + "1" + closing * depth))  # as text: PyYAML cannot even dump it
    return to_yaml(data)


#: Right and borderline values per field: these reach the planner and the renderers, where the bugs of
#: "validate passes, plan -o fails" live.
PLAUSIBLE: dict[tuple[str, ...], list[Any]] = {
    ("name",): ["a", "x" * 63, "x" * 64, "a.b_c-d", "A1", "-a", "a b"],
    ("application", "type"): ["training", "inference"],
    ("application", "model"): [
        {"onnx": "digits_mlp.onnx"}, {"onnx": "app.yaml"}, {"onnx": "missing.onnx"}, {"onnx": "src"},
        {"onnx": "x" * 300}, {"architecture": "resnet50"}, {"architecture": "bert_base"}, {"architecture": "nope"},
        {"architecture": "ResNet-50"},
    ],
    ("application", "batch_size"): [1, 64, 1_000_000, 1_000_001, 0, 7],
    ("application", "precision"): ["auto", "fp32", "fp16", "bf16", "int8"],
    ("application", "framework"): ["auto", "onnxruntime", "pytorch", "appopt-runtime", "tensorflow", "nope"],
    ("application", "data"): [
        {"samples": 1}, {"samples": 10**15, "epochs": 1e6}, {"samples": 10**15 + 1},
        {"samples": 100, "epochs": 1e-300}, {"samples": 5, "epochs": 1e6 + 1},
        {"path": "/scratch/x.npz", "epochs": 2.5}, {"path": "rel dir/$(id).npz"}, {"path": "x" * 5000},
        {"input_shape": [3, 224, 224]}, {"input_shape": [2**31 - 1] * 8}, {"input_shape": [1] * 9},
    ],
    ("application", "command"): [
        ["python3", "train.py"], ["python3", "src/main.py", "--x"], [], ["a b", "$(id)", "`id`"], ["-c"], ["x" * 3000],
    ],
    ("application", "code"): [
        ["train.py"], ["src"], ["train.py", "src"], ["src/main.py"], ["missing.py"], ["../etc"], [".."],
        ["/etc/hostname"], ["train.py", "./train.py"], ["model.onnx"], ["runtime"], ["a b.py"],
    ],
    ("target", "platform"): ["hpc", "cloud"],
    ("target", "cpu"): [
        {"arch": "x86_64", "model": "local"}, {"arch": "x86_64", "model": "xeon-8380", "cores": 80},
        {"arch": "aarch64", "model": "a64fx", "cores": 48}, {"arch": "x86_64", "model": "a64fx"},
        {"arch": "x86_64", "model": "a100"}, {"arch": "x86_64", "model": "xeon-8480", "cores": 10**6},
        {"arch": "x86_64", "model": "xeon-8480", "cores": 10**6 + 1}, {"arch": "ppc64le"},
        {"arch": "x86_64", "cores": 1},
    ],
    ("target", "accelerator"): [
        None, {"vendor": "nvidia", "model": "a100", "count": 4}, {"vendor": "nvidia", "model": "a100", "count": 64},
        {"vendor": "nvidia", "model": "a100", "count": 0}, {"vendor": "amd", "model": "a100"}, {"vendor": "nvidia"},
        {"vendor": "none", "count": 3}, {"vendor": "intel", "model": "xeon-8380"},
    ],
    ("target", "scheduler"): [*scheduler_names(), "lsf"],
    ("target", "nodes"): [1, 2, 100_000, 100_001],
    ("target", "partition"): ["gpu", "gpu,debug", "gpu debug", "a;b", "", "_x", "x+y@z", "ü", "gpu,", "-x"],
    ("target", "account"): ["proj1", "a b", "$(id)", "p.1@x", ",", "a" * 300],
    ("target", "walltime"): ["01:00:00", "2-00:00:00", "99999-999:59:59", "00:60:00", "00:00:60", "1:00:00"],
    ("target", "interconnect_gbps"): [0.1, 100, 1e6, 1e7, 1e-300],
    ("container", "formats"): [["docker"], ["singularity"], ["docker", "singularity"], [], ["docker", "docker"]],
    ("container", "registry"): [
        "registry.example.org/team/app", "localhost:5000/app", "a:b:c", "a..b/c", "host:5000", "x" * 300,
        "registry.example.org:443/a/b/c", "a/b_c", "a/b__c", "a/b___c", "a-/b", "-a/b", "a/-b", "a/b-",
    ],
    ("container", "tag"): ["latest", "v1.0", "_x", "a" * 128, "a" * 129, ".x", "-x"],
    ("optimisation", "goal"): ["latency", "throughput", "time_to_solution"],
    ("optimisation", "allow"): [
        {"frameworks": ["onnxruntime"]}, {"compilers": ["tvm", "xla"]}, {"libraries": ["mkl"]},
        {"precisions": ["fp16"]}, {"layouts": ["NHWC"]}, {"frameworks": ["nope"]},
    ],
    ("optimisation", "deny"): [
        {"frameworks": ["onnxruntime", "appopt-runtime"]}, {"libraries": ["mkl", "onednn"]}, {"compilers": ["none"]},
        {"precisions": ["fp32", "fp16", "bf16", "int8"]},
    ],
    ("optimisation", "top"): [1, 100, 101],
}


@st.composite
def plausible_specs(draw: st.DrawFn) -> str:
    """A shipped example with one to five fields set to right or borderline values (most pass ``validate``)."""
    data = draw(st.sampled_from(example_specs()))
    for _ in range(draw(st.integers(1, 5))):
        path = draw(st.sampled_from(sorted(PLAUSIBLE)))
        _set(data, path, draw(st.sampled_from(PLAUSIBLE[path])))
    return to_yaml(data)


def _bomb(levels: int, width: int) -> str:
    lines = ['l0: &l0 ["lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\nname: bomb\napplication: {type: inference, model: {architecture: resnet50}}\n"


def hostile_documents() -> st.SearchStrategy[str]:
    """Whole documents built to break a parser: bombs, recursion, depth, size, punctuation."""
    depth = st.sampled_from([10, 33, 100, 1000, 5000, 20000])
    return st.one_of(
        st.builds(_bomb, st.integers(2, 12), st.integers(2, 10)),
        st.sampled_from([
            "a: &a [*a]\n", "a: &a {b: *a}\n", "&a [*a, *a]\n", "name: &n x\napplication: *n\n",
            "base: &b {type: inference}\nname: x\napplication:\n  <<: *b\n  model: {architecture: resnet50}\n",
        ]),
        depth.map(lambda n: "name: x\napplication: " + "[" * n + "]" * n + "\n"),
        depth.map(lambda n: "name: x\napplication: " + "{a: " * n + "1" + "}" * n + "\n"),
        depth.map(lambda n: "".join(f"{'  ' * i}a:\n" for i in range(min(n, 3000))) + "  " * min(n, 3000) + "b: 1\n"),
        depth.map(lambda n: "- " * min(n, 3000) + "x\n"),
        st.sampled_from([1, 100, 4299, 4301, 10000]).map(
            lambda n: f"name: x\napplication:\n  type: inference\n  model: {{architecture: resnet50}}\n"
            f"  batch_size: {'9' * n}\n"
        ),
        st.sampled_from([100, 5000, 50000]).map(
            lambda n: "name: x\napplication: {type: inference, model: {architecture: resnet50}}\n"
            + "".join(f"unknown{i}: {i}\n" for i in range(n))
        ),
        st.sampled_from([1000, 100_000, 300_000]).map(lambda n: f"name: {'x' * n}\napplication: {'y' * n}\n"),
        st.text(alphabet="[]{}:,-?&*!|>'\"%@`# \n\tab01.~=", max_size=80),
        st.text(max_size=200),
        st.sampled_from(["", "\n", "---\n", "--- 1\n--- 2\n", "%YAML 1.1\n---\nname: x\n", "...\n", "\ufeffname: x\n",
                         "name: x\n\x00", "a: b: c\n", "\tname: x\n", "name: 'unclosed\n", "? [a]\n: 1\n"]),
    )


def random_structures() -> st.SearchStrategy[str]:
    """Random data under the spec's own keys (so it reaches the model validators, not just 'unknown key')."""
    keys = sorted({part for path in FIELD_PATHS for part in path})
    tree = st.recursive(
        st.one_of(hostile_values(), st.sampled_from(_NEAR_VALID)),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(keys), inner, max_size=5)),
        max_leaves=20,
    )
    return st.dictionaries(st.sampled_from(keys), tree, max_size=6).map(to_yaml)


def spec_inputs() -> st.SearchStrategy[str | bytes]:
    """Everything the fuzzer feeds ``appopt``: text of every kind, and now and then raw bytes."""
    return st.one_of(
        plausible_specs(), plausible_specs(), plausible_specs(), mutated_specs(), mutated_specs(), mutated_specs(),
        hostile_documents(), random_structures(), st.binary(max_size=64),
    )


# --- running one case ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    outcome: str
    detail: str = ""
    #: Wall-clock seconds of validate and plan together.
    seconds: float = 0.0


class _Hang(Exception):
    pass


class _Alarm:
    """SIGALRM after ``seconds``: raises :class:`_Hang`, and remembers it fired even when the exception lands in a
    place that swallows it (a gc callback prints "Exception ignored" and carries on)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.fired = seconds, False

    def _fire(self, signum: int, frame: Any) -> None:
        self.fired = True
        raise _Hang()

    @contextmanager
    def armed(self) -> Iterator[None]:
        previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


_runner = CliRunner()


def _message_problem(stderr: str) -> str | None:
    lines = stderr.splitlines()
    if len(lines) > MAX_ERROR_LINES:
        return f"{len(lines)} error lines"
    for line in lines:
        if not line.startswith(("error: ", "note: ")):
            return f"not an error line: {line[:200]!r}"
        if len(line) > MAX_LINE_CHARS + len("error: "):
            return f"an error line of {len(line):,} characters"
    return None


def check_spec(content: str | bytes, workdir: Path, hang_seconds: float = HANG_SECONDS) -> Result:
    """Run ``validate`` and (when it passes) ``plan -o`` on ``content``; classify what happened."""
    alarm = _Alarm(hang_seconds)
    started = time.monotonic()
    try:
        with alarm.armed():
            result = _check(content, workdir)
    except _Hang:
        alarm.fired = True
    seconds = time.monotonic() - started
    if alarm.fired:
        return Result("hang", f"over {hang_seconds:g} s", seconds)
    return dataclasses.replace(result, seconds=seconds)


def _check(content: str | bytes, workdir: Path) -> Result:
    spec = workdir / "app.yaml"
    if isinstance(content, bytes):
        spec.write_bytes(content)
    else:
        spec.write_text(content, encoding="utf-8", errors="surrogatepass")
    out = workdir / "out"
    try:
        validated = _runner.invoke(app, ["validate", str(spec)])
        bad = _bad_outcome("validate", validated)
        if bad:
            return bad
        if validated.exit_code != 0:
            if validated.stderr.startswith("error: "):
                return Result("rejected")
            return Result("bad-message", f"validate exit {validated.exit_code} with no error line")
        planned = _runner.invoke(app, ["plan", str(spec), "-o", str(out)])
        bad = _bad_outcome("plan", planned)
        if bad:
            return bad
        if planned.exit_code == 3:
            return Result("no-route")
        if planned.exit_code != 0:
            return Result("plan-after-validate", planned.stderr.strip()[:300])
        try:
            json.loads((out / "plan.json").read_text(encoding="utf-8"), parse_constant=_no_constant)
        except (OSError, ValueError) as exc:
            return Result("bad-plan-json", str(exc)[:200])
        return Result("ok")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _bad_outcome(command: str, result: Any) -> Result | None:
    """A traceback, or an error message that breaks the message rules, from ``appopt COMMAND``; None if neither."""
    crash = _crash(result)
    if crash:
        return Result("traceback", f"{command}: {crash}")
    problem = _message_problem(result.stderr)
    return Result("bad-message", f"{command}: {problem}") if problem else None


def _no_constant(name: str) -> None:
    raise ValueError(f"plan.json holds {name}, which is not JSON")


def _crash(result: Any) -> str | None:
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        return None
    if isinstance(exc, _Hang):
        raise exc
    frames = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" at {frames[0].filename}:{frames[0].lineno}" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:200]}{where}"


class Tally:
    """Counts by outcome, with the first few examples of each bad one."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[tuple[str, str]]] = {}
        self.slowest = Result("none")

    def add(self, content: str | bytes, result: Result) -> None:
        self.counts[result.outcome] += 1
        if result.seconds >= self.slowest.seconds:
            self.slowest = result
        if result.outcome in BAD and len(self.examples.setdefault(result.outcome, [])) < 5:
            shown = content[:300] if isinstance(content, str) else repr(content[:100])
            self.examples[result.outcome].append((result.detail, shown))

    @property
    def bad(self) -> int:
        return sum(self.counts[o] for o in BAD)

    def report(self) -> str:
        total = sum(self.counts.values())
        lines = [
            f"{total} specs: " + ", ".join(f"{o} {self.counts[o]}" for o in OUTCOMES)
            + f"; slowest {self.slowest.seconds:.1f} s ({self.slowest.outcome})"
        ]
        for outcome, cases in self.examples.items():
            for detail, shown in cases:
                lines.append(f"  {outcome}: {detail}\n    spec: {shown!r}")
        return "\n".join(lines)


def make_workdir() -> Path:
    """A directory with the example ONNX model and a code file next to where the spec goes."""
    workdir = Path(tempfile.mkdtemp(prefix="appopt-spec-fuzz-"))
    shutil.copy(EXAMPLES / "digits_mlp.onnx", workdir / "digits_mlp.onnx")
    (workdir / "train.py").write_text("print('train')\n", encoding="utf-8")
    (workdir / "src").mkdir()
    (workdir / "src" / "main.py").write_text("print('main')\n", encoding="utf-8")
    return workdir


def run_examples(
    examples: int, seed: int, on_result: Callable[[str | bytes, Result], None], hang_seconds: float = HANG_SECONDS
) -> None:
    """Draw ``examples`` inputs from :func:`spec_inputs` (seeded) and check each; generation only, no shrinking."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    workdir = make_workdir()
    for example in example_specs():  # warm up: imports, the catalog and the ONNX analysis are paid once, not timed
        check_spec(to_yaml(example), workdir, hang_seconds=600)

    @settings(
        max_examples=examples, database=None, deadline=None, phases=[Phase.generate], derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(spec_inputs())
    def one(content: str | bytes) -> None:
        on_result(content, check_spec(content, workdir, hang_seconds))

    try:
        hypothesis_seed(seed)(one)()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``python -m tests.fuzz spec [--examples N] [--seed S]``: counts by outcome; exit 1 on any bad one."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.fuzz spec")
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", type=int, default=500, help="print the counts every N specs (0: never)")
    args = parser.parse_args(argv)
    tally = Tally()
    started = time.monotonic()

    def record(content: str | bytes, result: Result) -> None:
        tally.add(content, result)
        if result.outcome in BAD:  # as it happens, not only in the summary
            shown = content[:300] if isinstance(content, str) else content[:100]
            print(f"{result.outcome}: {result.detail}\n  spec: {shown!r}", flush=True)
        done = sum(tally.counts.values())
        if args.progress and done % args.progress == 0:
            print(f"[{time.monotonic() - started:.0f}s] {tally.report().splitlines()[0]}", flush=True)

    run_examples(args.examples, args.seed, record)
    print(tally.report())
    print(f"{time.monotonic() - started:.0f} s")
    return 1 if tally.bad else 0
