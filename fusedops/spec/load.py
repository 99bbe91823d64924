"""Read ``ops.toml`` and check it: the generator's input, as plain dicts with every optional field filled in.

Only the generator (a development tool) reads the TOML, with ``tomllib`` (Python 3.11+); the package at run time
imports the generated ``tables.py`` instead, so it needs neither the TOML file nor a TOML parser.
"""

from __future__ import annotations

import math
from pathlib import Path

from . import formula

SPEC_PATH = Path(__file__).with_name("ops.toml")
OVERRIDE_KEYS = ("cpu", "cuda", "onnx", "fuser")
FUSER_MODES = ("formula", "onnx_op", "hand")
ATTR_TYPES = ("INT", "INTS", "FLOAT", "STRING")
INPUT_KINDS = ("data", "weight", "per_channel")
ADAPTERS = ("ort", "tensorrt")  # runtime adapters that may register an op
MAX_PARAMS = 2  # fusedops_step carries two parameters (a, b)
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz_")  # the chain grammar's step names


class SpecError(ValueError):
    """ops.toml breaks a rule; the message names the entry and the rule."""


def load(path: Path = SPEC_PATH) -> dict:
    """The checked spec: {"domain", "version", "plugin_namespace", "plugin_version", "limits", "dtypes",
    "reduces", "ops", "attributes", "steps"} with defaults filled in and each step's formula parsed ("tree")."""
    try:
        import tomllib  # lazy: Python 3.10 has none; the error below says so
    except ImportError as e:  # Python 3.10
        raise SpecError("reading ops.toml needs Python 3.11 or newer (tomllib)") from e
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    return check(raw)


def _require(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SpecError(f"ops.toml: {where}: {what}")


def _unique(items: list[dict], key: str, where: str) -> None:
    seen: set = set()
    for it in items:
        _require(it[key] not in seen, where, f"{key} {it[key]!r} is used twice")
        seen.add(it[key])


def check(raw: dict) -> dict:
    """Validate a parsed ops.toml and fill in the optional fields (see the header of ops.toml)."""
    for key in ("domain", "version", "plugin_namespace", "plugin_version", "limits", "dtypes", "reduces", "ops",
                "attributes", "steps"):
        _require(key in raw, "top level", f"missing {key!r}")
    limits = dict(raw["limits"])
    for key in ("max_steps", "max_extras", "max_rank", "max_chain_bytes", "max_num_groups"):
        _require(isinstance(limits.get(key), int) and limits[key] > 0, "limits", f"{key} must be a positive integer")
    spec = {k: raw[k] for k in ("domain", "version", "plugin_namespace", "plugin_version")}
    spec["limits"] = limits
    for group in ("dtypes", "reduces"):
        items = [dict(d) for d in raw[group]]
        _unique(items, "name", group)
        _unique(items, "code", group)
        _unique(items, "c", group)
        spec[group] = items
    spec["attributes"] = [_attribute(dict(a)) for a in raw["attributes"]]
    _unique(spec["attributes"], "name", "attributes")
    known_attrs = {a["name"] for a in spec["attributes"]}
    spec["ops"] = [_op(dict(o), known_attrs, limits) for o in raw["ops"]]
    for key in ("name", "code", "c"):
        _unique(spec["ops"], key, "ops")
    spec["steps"] = [_step(dict(s)) for s in raw["steps"]]
    _unique(spec["steps"], "name", "steps")
    _unique(spec["steps"], "code", "steps")
    names = {s["name"] for s in spec["steps"]}
    for s in spec["steps"]:
        for alias in s["aliases"]:
            _require(alias not in names, f"step {s['name']!r}", f"alias {alias!r} is also a step name")
            _require(set(alias) <= _NAME_CHARS, f"step {s['name']!r}", f"alias {alias!r} is not [a-z_]+")
            names.add(alias)
    return spec


def _attribute(a: dict) -> dict:
    where = f"attribute {a.get('name')!r}"
    _require(a.get("type") in ATTR_TYPES, where, f"type must be one of {ATTR_TYPES}")
    a.setdefault("required", False)
    a.setdefault("role", "kernel")
    a.setdefault("doc", "")
    _require(a["role"] in ("kernel", "plugin"), where, "role must be 'kernel' or 'plugin'")
    _require(a["required"] != ("default" in a), where, "give either required = true or a default")
    if "default" in a:
        want = {"INT": int, "INTS": list, "FLOAT": (int, float), "STRING": str}[a["type"]]
        _require(isinstance(a["default"], want) and not isinstance(a["default"], bool), where,
                 f"default must be a {a['type']}")
    else:
        a["default"] = None
    for key in ("range", "values", "grammar", "fixed", "finite", "per_dim"):
        a.setdefault(key, None)
    if a["type"] == "INTS":
        # ONNX's defaults of these lists depend on the shapes; an empty list is also the only default that a row of
        # the C X-macro tables can carry (a braced list would split the macro arguments)
        _require(a["default"] == [], where, "an INTS default must be [] (ONNX's shape-dependent default)")
        _require(a["per_dim"] in (1, 2), where, "an INTS attribute needs per_dim = 1 or 2 (values per spatial dim)")
    else:
        _require(a["per_dim"] is None, where, "per_dim is for INTS attributes only")
    return a


def _op(o: dict, known_attrs: set, limits: dict) -> dict:
    where = f"op {o.get('name')!r}"
    for key in ("name", "code", "c", "doc", "inputs", "attributes"):
        _require(key in o, where, f"missing {key!r}")
    inputs = []
    for i in o["inputs"]:
        i = dict(i)
        _require(i.get("kind") in INPUT_KINDS, where, f"input {i.get('name')!r}: kind must be one of {INPUT_KINDS}")
        i.setdefault("display", i["name"])
        i.setdefault("optional", False)
        _require(not i["optional"] or i["kind"] == "per_channel", where,
                 f"input {i['name']!r}: only a per-channel input may be optional")
        if "rank" in i:
            lo, hi = i["rank"]
            _require(1 <= lo <= hi <= limits["max_rank"], where, f"input {i['name']!r}: rank range outside "
                     f"1..max_rank")
        inputs.append(i)
    _require(inputs and inputs[0]["kind"] == "data" and "rank" in inputs[0], where,
             "the first input must be the data input X with a rank range")
    for name in o["attributes"]:
        _require(name in known_attrs, where, f"unknown attribute {name!r}")
    _require(isinstance(o.get("adapters"), list) and set(o["adapters"]) <= set(ADAPTERS), where,
             f"adapters must list some of {ADAPTERS} (the runtime adapters that register the op)")
    o["inputs"] = inputs
    return o


def _step(s: dict) -> dict:
    where = f"step {s.get('name')!r}"
    for key in ("name", "code", "formula"):
        _require(key in s, where, f"missing {key!r}")
    _require(bool(s["name"]) and set(s["name"]) <= _NAME_CHARS, where, "name must be [a-z_]+ (the chain grammar)")
    _require(isinstance(s["code"], int) and s["code"] > 0, where, "code must be a positive integer")
    s.setdefault("operand", False)
    s.setdefault("aliases", [])
    s.setdefault("note", "")
    s.setdefault("fuser", "formula")
    s.setdefault("onnx_op", None)
    s["overrides"] = dict(s.get("overrides", {}))
    params = [dict(p) for p in s.get("params", [])]
    _require(len(params) <= MAX_PARAMS, where, f"at most {MAX_PARAMS} parameters")
    _require(not (s["operand"] and params), where, "a binary step takes no parameters")
    reserved = {"x", "v", *formula.FUNCTIONS}
    for p in params:
        _require(p.get("name", "").isidentifier() and p["name"] not in reserved, where,
                 f"parameter name {p.get('name')!r} is not a free identifier")
        _require(isinstance(p.get("default"), (int, float)) and not isinstance(p.get("default"), bool), where,
                 f"parameter {p['name']!r} needs a numeric default")
        p["default"] = float(p["default"])
        p.setdefault("allow_inf", False)
        p.setdefault("nonzero", False)
        _require(not math.isnan(p["default"]), where, f"parameter {p['name']!r}: default is NaN")
        _require(p["allow_inf"] or math.isfinite(p["default"]), where, f"parameter {p['name']!r}: default not finite")
        _require(not p["nonzero"] or p["default"] != 0.0, where, f"parameter {p['name']!r}: default is 0")
    s["params"] = params
    names = [p["name"] for p in params]
    ordered = s.get("ordered")
    if ordered is not None:
        _require(len(ordered) == 2 and all(n in names for n in ordered), where,
                 "ordered must name two of the step's parameters")
        lo, hi = (params[names.index(n)]["default"] for n in ordered)
        _require(lo <= hi, where, f"defaults break {ordered[0]} <= {ordered[1]}")
    s["ordered"] = ordered
    variables = ["x", "v"] if s["operand"] else ["x", *names]
    try:
        s["tree"] = formula.parse(s["formula"], variables)
    except formula.FormulaError as e:
        raise SpecError(f"ops.toml: {where}: {e}") from None
    _require("x" in formula.variables(s["tree"]), where, "the formula must use x")
    for key in s["overrides"]:
        _require(key in OVERRIDE_KEYS, where, f"unknown override {key!r} (known: {', '.join(OVERRIDE_KEYS)})")
    _require(s["fuser"] in FUSER_MODES, where, f"fuser must be one of {FUSER_MODES}")
    _require((s["fuser"] == "hand") == ("fuser" in s["overrides"]), where,
             "fuser = 'hand' and overrides.fuser (the reason) go together")
    if s["onnx_op"] is not None:
        op = dict(s["onnx_op"])
        _require(isinstance(op.get("op"), str), where, "onnx_op needs op")
        op.setdefault("since", 1)
        op.setdefault("defaults", {})
        _require(set(op["defaults"]) == set(names), where, "onnx_op.defaults must give the op's default of every "
                 "parameter (its attributes are named like the parameters)")
        s["onnx_op"] = op
    _require(s["fuser"] != "onnx_op" or s["onnx_op"] is not None, where, "fuser = 'onnx_op' needs an onnx_op")
    return s
