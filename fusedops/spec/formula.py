"""The step formula language of ``ops.toml``: text to a tree of tuples, and one fold that every backend walks the
tree with (C text in the generator, ONNX nodes in function bodies, onnxscript patterns in the fuser, torch tensors
in the tests).

Grammar (linear, hand-written recursive descent; formulas are short spec text, never user input)::

    expr    := compare | sum
    compare := sum ("<" | ">" | "<=" | ">=") sum       only as the first argument of where
    sum     := term (("+" | "-") term)*                  left-associative
    term    := unary (("*" | "/") unary)*                left-associative
    unary   := "-" unary | atom
    atom    := number | name | name "(" expr ("," expr)* ")" | "(" expr ")"

Tree: ``("num", value)``, ``("var", name)`` or ``(op, *children)`` with op one of ``add sub mul div neg lt gt le ge``
or a function name. Functions: where(c, a, b) (a where c holds, else b; c is false for NaN), clamp(t, lo, hi)
(= where(t < lo, lo, where(t > hi, hi, t))), exp, log, log1p, tanh, erf, abs, sqrt. Trees are plain tuples so the
generated Python tables can hold them as literals.
"""

from __future__ import annotations

from typing import Callable, Iterable

BINARY_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
COMPARE_OPS = {"<": "lt", ">": "gt", "<=": "le", ">=": "ge"}
FUNCTIONS = {"where": 3, "clamp": 3, "exp": 1, "log": 1, "log1p": 1, "tanh": 1, "erf": 1, "abs": 1, "sqrt": 1}
_NAME_START = "abcdefghijklmnopqrstuvwxyz_"
_NAME_CHARS = _NAME_START + "0123456789"
_DIGITS = "0123456789"


class FormulaError(ValueError):
    """A formula that is not in the language; the message quotes the formula and the offending position."""


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) with kind one of num, name, op; ends with ("end", "", len)."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t":
            i += 1
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            j = i
            while j < n and text[j] in _DIGITS:
                j += 1
            if j < n and text[j] == ".":
                j += 1
                while j < n and text[j] in _DIGITS:
                    j += 1
            if j < n and text[j] in "eE":
                k = j + 1 + (j + 1 < n and text[j + 1] in "+-")
                if k < n and text[k] in _DIGITS:
                    j = k
                    while j < n and text[j] in _DIGITS:
                        j += 1
            out.append(("num", text[i:j], i))
            i = j
        elif ch in _NAME_START:
            j = i
            while j < n and text[j] in _NAME_CHARS:
                j += 1
            out.append(("name", text[i:j], i))
            i = j
        elif text[i:i + 2] in ("<=", ">="):
            out.append(("op", text[i:i + 2], i))
            i += 2
        elif ch in "+-*/<>(),":
            out.append(("op", ch, i))
            i += 1
        else:
            raise FormulaError(f"formula {text!r}: unexpected character {ch!r} at offset {i}")
    out.append(("end", "", n))
    return out


class _Parser:
    def __init__(self, text: str, variables: Iterable[str]):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.variables = set(variables)

    def fail(self, what: str):
        kind, tok, at = self.toks[self.i]
        shown = "the end" if kind == "end" else repr(tok)
        raise FormulaError(f"formula {self.text!r}: {what} at offset {at} (found {shown})")

    def peek(self) -> str:
        return self.toks[self.i][1]

    def take(self, tok: str) -> None:
        if self.peek() != tok:
            self.fail(f"expected {tok!r}")
        self.i += 1

    def expr(self, allow_compare: bool = False):
        left = self.sum()
        if self.peek() in COMPARE_OPS and self.toks[self.i][0] == "op":
            if not allow_compare:
                self.fail("a comparison is only allowed as the condition of where")
            op = COMPARE_OPS[self.peek()]
            self.i += 1
            return (op, left, self.sum())
        return left

    def sum(self):
        node = self.term()
        while self.peek() in ("+", "-") and self.toks[self.i][0] == "op":
            op = BINARY_OPS[self.peek()]
            self.i += 1
            node = (op, node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.peek() in ("*", "/") and self.toks[self.i][0] == "op":
            op = BINARY_OPS[self.peek()]
            self.i += 1
            node = (op, node, self.unary())
        return node

    def unary(self):
        if self.peek() == "-" and self.toks[self.i][0] == "op":
            self.i += 1
            return ("neg", self.unary())
        return self.atom()

    def atom(self):
        kind, tok, _ = self.toks[self.i]
        if kind == "num":
            self.i += 1
            return ("num", float(tok))
        if kind == "name":
            self.i += 1
            if self.peek() == "(":
                if tok not in FUNCTIONS:
                    self.i -= 1
                    self.fail(f"unknown function (known: {', '.join(FUNCTIONS)})")
                self.take("(")
                args = [self.expr(allow_compare=tok == "where")]
                while self.peek() == ",":
                    self.i += 1
                    args.append(self.expr())
                self.take(")")
                if len(args) != FUNCTIONS[tok]:
                    raise FormulaError(f"formula {self.text!r}: {tok} takes {FUNCTIONS[tok]} argument(s), got "
                                       f"{len(args)}")
                if tok == "where" and args[0][0] not in COMPARE_OPS.values():
                    raise FormulaError(f"formula {self.text!r}: the condition of where must be a comparison")
                return (tok, *args)
            if tok not in self.variables:
                self.i -= 1
                self.fail(f"unknown name (variables: {', '.join(sorted(self.variables))})")
            return ("var", tok)
        if tok == "(":
            self.i += 1
            node = self.expr()
            self.take(")")
            return node
        self.fail("expected a number, a name or '('")


def parse(text: str, variables: Iterable[str]) -> tuple:
    """The tree of ``text``; ``variables`` are the names it may use (x, v for binary steps, parameter names)."""
    p = _Parser(text, variables)
    tree = p.expr()
    if p.toks[p.i][0] != "end":
        p.fail("unexpected text after the formula")
    return tree


def fold(tree: tuple, num: Callable, var: Callable, op: Callable):
    """Bottom-up walk: ``num(value)`` for a literal, ``var(name)`` for a variable, ``op(name, args)`` for the rest
    (args already folded). Returns what the root's callback returns."""
    kind = tree[0]
    if kind == "num":
        return num(tree[1])
    if kind == "var":
        return var(tree[1])
    return op(kind, [fold(t, num, var, op) for t in tree[1:]])


def variables(tree: tuple) -> set[str]:
    """The variable names a tree uses."""
    used: set[str] = set()
    fold(tree, lambda v: None, used.add, lambda name, args: None)
    return used
