"""The Python mirrors of the C enums and sizes match the C sources, so a change on one side fails here.

The C files are parsed as text (enums and integer ``#define``s); every C enum that a Python module mirrors must be
mirrored whole, with equal values, and the name-keyed tables (activations, chain opcodes) must map to the enum
members of the same meaning.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from runtime import native, static_plan
from runtime.kernels import conv_transpose, fused, rnn, rnn_native
from runtime.native import abi, convnets, ops
from runtime.native import attention as native_attention
from runtime.native import training as native_training
from runtime.native import upsample as native_upsample

#: Modules whose module-level integer constants mirror C enums (fused's opcodes are name-keyed: see table_drift).
MIRRORS = (
    abi, rnn_native, conv_transpose, native_attention, convnets, native_upsample, static_plan, native_training
)
#: Sizes mirrored from C ``#define``s (names compared one by one: rnn_native.SERIAL_WORK is not kernels.c's).
MIRRORED_DEFINES = {
    "NB": abi.NB,
    "VL": abi.VL,
    "MAXTAPS": abi.MAXTAPS,
    "DP_MAXC": abi.DP_MAXC,
    "AROWS": native_attention.ROWS,
    "SC_MAX_RANK": convnets.SC_MAX_RANK,
}


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL))


def c_enums(text: str) -> list[dict[str, int]]:
    """Every ``enum { ... }`` in ``text`` as ``{member: value}`` (implicit values count up from the last)."""
    blocks = []
    for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", _strip_comments(text), flags=re.DOTALL):
        members: dict[str, int] = {}
        value = -1
        for item in filter(None, (part.strip() for part in body.split(","))):
            name, _, explicit = (s.strip() for s in item.partition("="))
            value = int(explicit, 0) if explicit else value + 1
            members[name] = value
        blocks.append(members)
    return blocks


def c_defines(text: str) -> dict[str, int]:
    """Integer-literal ``#define NAME 123`` lines (first definition wins, as under the x86 branch)."""
    out: dict[str, int] = {}
    for name, value in re.findall(r"^#define\s+(\w+)\s+(-?\d+)L?\b", _strip_comments(text), flags=re.MULTILINE):
        out.setdefault(name, int(value))
    return out


def _c_text() -> str:
    return "\n".join(path.read_text() for path in (native.SOURCE, *native.EXTRA_SOURCES, *native.HEADERS))


def _int_constants(module: ModuleType) -> dict[str, int]:
    return {k: v for k, v in vars(module).items() if k.isupper() and type(v) is int}


def enum_drift(text: str, modules: tuple[ModuleType, ...] = MIRRORS) -> list[str]:
    """Differences between the C enums/defines in ``text`` and the modules' constants (empty when in step)."""
    defines = c_defines(text)
    problems = [
        f"{name} = {value} in Python, C #define says {defines.get(name)}"
        for name, value in MIRRORED_DEFINES.items()
        if defines.get(name) != value
    ]
    for module in modules:
        consts = _int_constants(module)
        mirrored = 0
        for block in c_enums(text):
            if not block.keys() & consts.keys():
                continue
            mirrored += 1
            for name, value in block.items():
                if consts.get(name) != value:
                    problems.append(f"{module.__name__}.{name} = {consts.get(name)}, C says {value}")
        if not mirrored:
            problems.append(f"{module.__name__} mirrors no C enum: the check found nothing to compare")
    return problems


def table_drift(text: str) -> list[str]:
    """Differences between the name-keyed Python tables and the C enum members they stand for."""
    members = {k: v for block in c_enums(text) for k, v in block.items()}
    expected = {
        "native.ops.ACTIVATIONS": (ops.ACTIVATIONS, {"": "ACT_NONE", "Relu": "ACT_RELU", "Clip": "ACT_CLIP",
                                                      "LeakyRelu": "ACT_LEAKY", "Silu": "ACT_SILU",
                                                      "Sigmoid": "ACT_SIGMOID", "HardSigmoid": "ACT_HARDSIGMOID",
                                                      "HardSwish": "ACT_HARDSWISH", "Gelu": "ACT_GELU",
                                                      "Tanh": "ACT_TANH"}),
        "fused.CHAIN_BINARY": (fused.CHAIN_BINARY, {"Add": "EO_ADD", "Sub": "EO_SUB", "Mul": "EO_MUL",
                                                    "Div": "EO_DIV", "Max": "EO_MAX", "Min": "EO_MIN"}),
        "fused.CHAIN_UNARY": (fused.CHAIN_UNARY, {"Relu": "EO_RELU", "Neg": "EO_NEG", "Abs": "EO_ABS",
                                                  "Exp": "EO_EXP", "Erf": "EO_ERF", "Sigmoid": "EO_SIGMOID",
                                                  "Tanh": "EO_TANH", "Sqrt": "EO_SQRT", "Reciprocal": "EO_RECIP",
                                                  "Clip": "EO_CLIP", "LeakyRelu": "EO_LEAKY_RELU",
                                                  "Softplus": "EO_SOFTPLUS", "Mish": "EO_MISH"}),
        "fused.KIND_*": ({k: v for k, v in vars(fused).items() if k.startswith("KIND_")},
                         {"KIND_NONE": "EK_NONE", "KIND_SCALAR": "EK_SCALAR", "KIND_FULL": "EK_FULL",
                          "KIND_INNER": "EK_INNER", "KIND_SELF": "EK_SELF", "KIND_REG": "EK_REG"}),
        "fused.CHAIN_* steps": ({"CHAIN_POW": fused.CHAIN_POW, "CHAIN_SAVE": fused.CHAIN_SAVE,
                                 "CHAIN_LOAD": fused.CHAIN_LOAD, "CHAIN_REGISTERS": fused.CHAIN_REGISTERS},
                                {"CHAIN_POW": "EO_POW", "CHAIN_SAVE": "EO_SAVE", "CHAIN_LOAD": "EO_LOAD",
                                 "CHAIN_REGISTERS": "EW_REGS"}),
        "rnn._NATIVE_ACTIVATIONS": (rnn._NATIVE_ACTIVATIONS, {"sigmoid": "RA_SIGMOID", "tanh": "RA_TANH",
                                                              "relu": "RA_RELU"}),
    }  # fmt: skip
    problems = []
    for label, (table, names) in expected.items():
        if set(table) != set(names):
            problems.append(f"{label} has keys {sorted(table)}, the test knows {sorted(names)}")
        for key, c_name in names.items():
            if table.get(key) != members.get(c_name):
                problems.append(f"{label}[{key!r}] = {table.get(key)}, C {c_name} = {members.get(c_name)}")
    return problems


def test_the_c_sources_parse_into_enums() -> None:
    blocks = c_enums(_c_text())
    assert {"EO_ADD": 0, "EO_SUB": 1}.items() <= next(b for b in blocks if "EO_ADD" in b).items()
    assert next(b for b in blocks if "RA_RELU" in b) == {"RA_SIGMOID": 0, "RA_TANH": 1, "RA_RELU": 2}
    assert c_defines(_c_text())["NB"] == 32


def test_python_constants_mirror_the_c_enums_and_defines() -> None:
    assert enum_drift(_c_text()) == []


def test_python_tables_mirror_the_c_enums() -> None:
    assert table_drift(_c_text()) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("enum { EO_ADD, EO_SUB,", "enum { EO_SUB, EO_ADD,"),  # two opcodes swapped
        ("enum { GP_X, GP_N,", "enum { GP_N, GP_X,"),  # an argument slot moved
        ("RN_XP_T, RN_XP_B,", "RN_XP_T, RN_XP_PAD, RN_XP_B,"),  # a slot inserted
        ("AT_SCALE, AT_CHUNK,", "AT_CHUNK, AT_SCALE,"),  # fused attention's scale and chunk swapped
        ("EB_MEAN, EB_STATUS,", "EB_STATUS, EB_MEAN,"),  # convnets.c's embedding bag slots swapped
        ("#define NB 32", "#define NB 16"),
        ("ACT_CLIP = 2, ACT_LEAKY = 3", "ACT_CLIP = 3, ACT_LEAKY = 2"),
    ],
)
def test_a_change_on_the_c_side_is_caught(old: str, new: str) -> None:
    text = _c_text()
    assert old in text
    drifted = text.replace(old, new, 1)
    assert enum_drift(drifted) + table_drift(drifted) != []
