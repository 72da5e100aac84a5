"""Demo chains made by Steplab itself, so `make demo` needs no data set: multi-step
arithmetic word problems (shopping, travel, recipes, ...) solved step by step, with a known
fraction of chains carrying one injected arithmetic error.

Pure Python, no Django. Every computation is written as a LaTeX equation in its step
(``$4 \\times 3 = 12$``). In a chain with an injected error, the result of one step is
wrong and every later step computes correctly from that wrong value, so the final answer
is wrong too: exactly the kind of chain a process reward model must catch at the right
step. The wrong step's 0-based index is kept in ``meta["injected_error_step"]`` (None for a
correct chain); no labels are attached, the chains are for people to grade.

>>> chains = generate_chains(count=3, seed=7, error_rate=0.0)
>>> [c.answer == c.reference_answer for c in chains]
[True, True, True]
"""

from __future__ import annotations

import ast
import json
import operator
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR_NAME = "steplab-demo-v1"
NAMES = (
    "Maya", "Omar", "Lena", "Kenji", "Ana", "Tariq", "Sofia", "Ravi", "Chloe", "Mateo",
    "Amara", "Jonas", "Priya", "Diego", "Elif", "Noah", "Yara", "Felix", "Zoe", "Hugo",
)  # fmt: skip


@dataclass(frozen=True)
class DemoChain:
    problem: str
    steps: tuple[str, ...]
    answer: str
    reference_answer: str
    scenario: str
    injected_error_step: int | None

    def as_record(self) -> dict[str, Any]:
        """The chain as a Steplab generic JSONL record (no labels)."""
        return {
            "problem": self.problem,
            "steps": list(self.steps),
            "answer": self.answer,
            "reference_answer": self.reference_answer,
            "generator": GENERATOR_NAME,
            "meta": {"scenario": self.scenario, "injected_error_step": self.injected_error_step},
        }


@dataclass(frozen=True)
class _Op:
    """One computation step: ``expr`` is a LaTeX expression over earlier values
    (``"{n} \\times {price}"``), ``prose`` a sentence around the equation (``{eq}``)."""

    name: str
    expr: str
    prose: str


@dataclass
class _Plan:
    scenario: str
    problem: str
    givens: dict[str, int]
    ops: list[_Op]
    conclusion: str  # with {answer}
    intro: str | None = None


# --- arithmetic ----------------------------------------------------------------------------

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def latex_to_python(expr: str) -> str:
    """``"2 \\times (3 + 4) \\div 7"`` -> ``"2 * (3 + 4) / 7"``."""
    return expr.replace("\\times", "*").replace("\\div", "/").replace("\\cdot", "*")


def evaluate(expr: str) -> float:
    """Evaluate a LaTeX arithmetic expression of numbers, + - \\times \\div and parentheses.

    >>> evaluate("2 \\\\times (12 + 9)")
    42
    """

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"not plain arithmetic: {expr!r}")

    return walk(ast.parse(latex_to_python(expr), mode="eval"))


def format_number(value: float) -> str:
    """Integers without a decimal point, anything else to at most two decimals."""
    rounded = round(value, 2)
    if rounded == int(rounded):
        return str(int(rounded))
    return f"{rounded:.2f}".rstrip("0").rstrip(".")


def _corrupt(value: float, rng: random.Random) -> float:
    """A plausible slip: an off-by-a-little result or two swapped digits, never the
    right value and never negative."""
    candidates = [value + d for d in (1, 2, 3, 5, 10, -1, -2, -3, -10) if value + d > 0]
    text = format_number(value)
    if value == int(value) and len(text) >= 2 and text[-1] != text[-2]:
        candidates.append(float(text[:-2] + text[-1] + text[-2]))
    wrong = rng.choice([c for c in candidates if c != value and c > 0])
    return wrong


# --- scenarios -----------------------------------------------------------------------------
# Each returns a plan whose ops all feed the final value, so an error anywhere reaches the
# answer. Parameters are chosen so that a correct chain's divisions come out even (the
# fuel litres aside, which have at most two decimals); a chain carrying a wrong value may
# then divide unevenly, and writes the quotient to two decimals as a person would.


def _shopping(rng: random.Random) -> _Plan:
    name = rng.choice(NAMES)
    items = rng.sample(
        [("notebooks", 2, 6), ("pens", 1, 3), ("folders", 2, 5), ("markers", 1, 4),
         ("erasers", 1, 2), ("rulers", 2, 4), ("sticker packs", 1, 3)],
        k=rng.choice((2, 3)),
    )  # fmt: skip
    givens: dict[str, int] = {}
    parts, ops = [], []
    for i, (item, low, high) in enumerate(items):
        givens[f"n{i}"] = rng.randint(2, 9)
        givens[f"p{i}"] = rng.randint(low, high)
        parts.append(f"{givens[f'n{i}']} {item} at {givens[f'p{i}']} dollars each")
        ops.append(_Op(f"c{i}", f"{{n{i}}} \\times {{p{i}}}", f"The {item} cost {{eq}} dollars."))
    subtotal = sum(givens[f"n{i}"] * givens[f"p{i}"] for i in range(len(items)))
    ops.append(
        _Op(
            "sub",
            " + ".join(f"{{c{i}}}" for i in range(len(items))),
            "Together that is {eq} dollars.",
        )
    )
    coupon = rng.choice((0, 0, 3, 5))
    total_name = "sub"
    extra = ""
    if coupon and subtotal > coupon + 5:
        givens["coupon"] = coupon
        ops.append(_Op("tot", "{sub} - {coupon}", f"With the coupon, {name} pays {{eq}} dollars."))
        total_name = "tot"
        extra = f" A coupon takes {coupon} dollars off the total."
        subtotal -= coupon
    # Room above the total, so that a slip in the sum still leaves positive change.
    givens["bill"] = next(b for b in (20, 50, 100, 200, 500) if b >= subtotal + 12)
    ops.append(_Op("change", f"{{bill}} - {{{total_name}}}", "The change is {eq} dollars."))
    listing = ", ".join(parts[:-1]) + f" and {parts[-1]}"
    problem = (
        f"{name} buys {listing}.{extra} {name} pays with a {givens['bill']}-dollar bill. "
        "How many dollars of change does " + name + " get?"
    )
    return _Plan(
        "shopping",
        problem,
        givens,
        ops,
        f"{name} gets {{answer}} dollars in change.",
        intro="First find the total cost, then subtract it from the bill.",
    )


def _travel(rng: random.Random) -> _Plan:
    name = rng.choice(NAMES)
    legs = rng.choice((2, 3))
    givens: dict[str, int] = {}
    ops, parts = [], []
    for i in range(legs):
        givens[f"s{i}"] = rng.choice((40, 50, 60, 70, 80, 90, 100, 120))
        givens[f"h{i}"] = rng.randint(1, 4)
        parts.append(f"{givens[f's{i}']} km/h for {givens[f'h{i}']} hours")
        ops.append(_Op(f"d{i}", f"{{s{i}}} \\times {{h{i}}}", f"Leg {i + 1} covers {{eq}} km."))
    ops.append(
        _Op("dist", " + ".join(f"{{d{i}}}" for i in range(legs)), "The whole trip is {eq} km.")
    )
    distance = sum(givens[f"s{i}"] * givens[f"h{i}"] for i in range(legs))
    hours = sum(givens[f"h{i}"] for i in range(legs))
    listing = ", then ".join(parts)
    if distance % hours == 0:
        ops.append(
            _Op("hours", " + ".join(f"{{h{i}}}" for i in range(legs)), "It takes {eq} hours.")
        )
        ops.append(_Op("avg", "{dist} \\div {hours}", "The average speed is {eq} km/h."))
        question = "What is the average speed over the whole trip, in km/h?"
        conclusion = "The average speed is {answer} km/h."
    else:
        givens["fuel"] = rng.choice((5, 6, 7, 8))
        ops.append(
            _Op("litres", "{dist} \\times {fuel} \\div 100", "The car burns {eq} litres of fuel.")
        )
        question = (
            f"The car uses {givens['fuel']} litres of fuel per 100 km. "
            "How many litres does the trip use?"
        )
        conclusion = "The trip uses {answer} litres of fuel."
    problem = f"{name} drives at {listing}. {question}"
    return _Plan("travel", problem, givens, ops, conclusion)


def _recipe(rng: random.Random) -> _Plan:
    name = rng.choice(NAMES)
    base = rng.choice((2, 4, 6))
    factor = rng.randint(2, 5)
    givens = {
        "base": base,
        "people": base * factor,
        "flour": rng.choice((150, 200, 250, 300, 350)),
        "sugar": rng.choice((50, 75, 100, 120)),
    }
    ops = [
        _Op("factor", "{people} \\div {base}", "The recipe must be scaled by {eq}."),
        _Op("f", "{flour} \\times {factor}", "Flour: {eq} grams."),
        _Op("s", "{sugar} \\times {factor}", "Sugar: {eq} grams."),
        _Op("both", "{f} + {s}", "Flour and sugar together weigh {eq} grams."),
    ]
    problem = (
        f"A cake recipe for {base} people uses {givens['flour']} g of flour and "
        f"{givens['sugar']} g of sugar. {name} bakes it for {givens['people']} people. "
        "How many grams of flour and sugar are needed in total?"
    )
    return _Plan("recipe", problem, givens, ops, f"{name} needs {{answer}} grams in total.")


def _savings(rng: random.Random) -> _Plan:
    name = rng.choice(NAMES)
    givens = {
        "weekly": rng.choice((5, 8, 10, 12, 15, 20, 25)),
        "weeks": rng.randint(4, 12),
        "gift": rng.choice((10, 20, 30)),
    }
    have = givens["weekly"] * givens["weeks"] + givens["gift"]
    givens["spend1"] = rng.randint(5, max(6, have // 2))
    givens["spend2"] = rng.randint(3, max(4, have - givens["spend1"] - 10))
    ops = [
        _Op("saved", "{weekly} \\times {weeks}", "From pocket money: {eq} dollars."),
        _Op("have", "{saved} + {gift}", "With the birthday gift: {eq} dollars."),
        _Op("spent", "{spend1} + {spend2}", "The purchases cost {eq} dollars."),
        _Op("left", "{have} - {spent}", "What is left: {eq} dollars."),
    ]
    problem = (
        f"{name} saves {givens['weekly']} dollars a week for {givens['weeks']} weeks and gets "
        f"{givens['gift']} dollars for a birthday. Then {name} buys a game for "
        f"{givens['spend1']} dollars and a book for {givens['spend2']} dollars. "
        f"How many dollars does {name} have left?"
    )
    return _Plan("savings", problem, givens, ops, f"{name} has {{answer}} dollars left.")


def _fence(rng: random.Random) -> _Plan:
    givens = {
        "length": rng.randint(8, 30),
        "width": rng.randint(5, 20),
        "gate": rng.choice((1, 2, 3)),
        "price": rng.choice((4, 6, 7, 9, 12)),
    }
    ops = [
        _Op("perimeter", "2 \\times ({length} + {width})", "The perimeter is {eq} m."),
        _Op("fence", "{perimeter} - {gate}", "Without the gate, {eq} m need fencing."),
        _Op("cost", "{fence} \\times {price}", "The fence costs {eq} dollars."),
    ]
    problem = (
        f"A rectangular garden is {givens['length']} m long and {givens['width']} m wide. "
        f"A fence goes all around it except for a {givens['gate']} m gate, and fencing costs "
        f"{givens['price']} dollars per metre. How much does the fence cost?"
    )
    return _Plan(
        "garden",
        problem,
        givens,
        ops,
        "The fence costs {answer} dollars.",
        intro="The fence follows the perimeter, minus the gate.",
    )


def _school_trip(rng: random.Random) -> _Plan:
    givens = {
        "classes": rng.randint(3, 6),
        "students": rng.randint(18, 30),
        "teachers": rng.randint(2, 8),
        "seats": rng.choice((40, 45, 50, 52)),
    }
    people = givens["classes"] * givens["students"] + givens["teachers"]
    givens["buses"] = people // givens["seats"] + 1
    ops = [
        _Op("kids", "{classes} \\times {students}", "There are {eq} students."),
        _Op("people", "{kids} + {teachers}", "With the teachers, {eq} people travel."),
        _Op("capacity", "{buses} \\times {seats}", "The buses have {eq} seats."),
        _Op("empty", "{capacity} - {people}", "So {eq} seats stay empty."),
    ]
    problem = (
        f"A school sends {givens['classes']} classes of {givens['students']} students and "
        f"{givens['teachers']} teachers on a trip in {givens['buses']} buses with "
        f"{givens['seats']} seats each. How many seats stay empty?"
    )
    return _Plan("school trip", problem, givens, ops, "{answer} seats stay empty.")


def _printing(rng: random.Random) -> _Plan:
    rate = rng.choice((12, 15, 20, 24, 30))
    docs = rng.randint(3, 9)
    # Make the total pages a multiple of the rate so the correct chain divides evenly.
    pages = rng.choice([p for p in range(4, 61) if (docs * p) % rate == 0] or [rate])
    givens = {"docs": docs, "pages": pages, "rate": rate, "pause": rng.choice((2, 5, 10))}
    ops = [
        _Op("total", "{docs} \\times {pages}", "The job has {eq} pages."),
        _Op("minutes", "{total} \\div {rate}", "Printing takes {eq} minutes."),
        _Op("all", "{minutes} + {pause}", "With the paper refill, {eq} minutes."),
    ]
    problem = (
        f"A printer prints {rate} pages per minute. It must print {docs} reports of "
        f"{pages} pages each, and stops once for {givens['pause']} minutes to refill paper. "
        "How many minutes does the job take?"
    )
    return _Plan("printing", problem, givens, ops, "The job takes {answer} minutes.")


def _market(rng: random.Random) -> _Plan:
    name = rng.choice(NAMES)
    givens = {
        "crates": rng.randint(4, 15),
        "kg": rng.choice((8, 10, 12, 15, 20)),
        "price": rng.choice((2, 3, 4, 5)),
        "stall": rng.choice((20, 25, 30, 40)),
        "fuel": rng.choice((10, 15, 18, 22)),
    }
    fruit = rng.choice(("apples", "pears", "plums", "tomatoes", "oranges"))
    ops = [
        _Op("weight", "{crates} \\times {kg}", "The harvest weighs {eq} kg."),
        _Op("revenue", "{weight} \\times {price}", "Selling it brings {eq} dollars."),
        _Op("costs", "{stall} + {fuel}", "The costs are {eq} dollars."),
        _Op("profit", "{revenue} - {costs}", "The profit is {eq} dollars."),
    ]
    problem = (
        f"{name} picks {givens['crates']} crates of {fruit} with {givens['kg']} kg in each "
        f"and sells all of it at {givens['price']} dollars per kg. The market stall costs "
        f"{givens['stall']} dollars and fuel {givens['fuel']} dollars. "
        "What is the profit in dollars?"
    )
    return _Plan("market", problem, givens, ops, f"{name}'s profit is {{answer}} dollars.")


def _bakery(rng: random.Random) -> _Plan:
    box = rng.choice((4, 6, 8, 12))
    batches = rng.randint(2, 9)
    per_batch = box * rng.randint(2, 6)
    givens = {"batches": batches, "per_batch": per_batch, "box": box}
    ops = [
        _Op("cookies", "{batches} \\times {per_batch}", "The baker makes {eq} cookies."),
        _Op("boxes", "{cookies} \\div {box}", "That fills {eq} boxes."),
    ]
    problem = (
        f"A baker bakes {batches} batches of {per_batch} cookies and packs them in boxes of "
        f"{box}. How many boxes does the baker fill?"
    )
    return _Plan("bakery", problem, givens, ops, "The baker fills {answer} boxes.")


SCENARIOS: tuple[Callable[[random.Random], _Plan], ...] = (
    _shopping, _travel, _recipe, _savings, _fence, _school_trip, _printing, _market, _bakery,
)  # fmt: skip


# --- chains --------------------------------------------------------------------------------


def _solve(plan: _Plan, *, error_op: int | None, rng: random.Random) -> tuple[list[str], float]:
    """Write the plan's steps; with ``error_op`` the result of that op is corrupted and
    every later op computes from the wrong value."""
    values: dict[str, float] = dict(plan.givens)
    steps: list[str] = []
    for i, op in enumerate(plan.ops):
        expr = op.expr.format(**{k: format_number(v) for k, v in values.items()})
        result = round(evaluate(expr), 2)
        if i == error_op:
            result = _corrupt(result, rng)
        values[op.name] = result
        steps.append(op.prose.format(eq=f"${expr} = {format_number(result)}$"))
    return steps, values[plan.ops[-1].name]


def _chain(plan: _Plan, *, with_error: bool, rng: random.Random) -> DemoChain:
    steps, reference = _solve(plan, error_op=None, rng=rng)
    intro = [plan.intro] if plan.intro and rng.random() < 0.5 else []
    error_step: int | None = None
    answer = reference
    if with_error:
        # An error in any op reaches the answer (every op feeds the last), but a rare
        # rounding coincidence could hide it: try the ops in a random order.
        for op_index in rng.sample(range(len(plan.ops)), k=len(plan.ops)):
            candidate, value = _solve(plan, error_op=op_index, rng=rng)
            if format_number(value) != format_number(reference):
                steps, answer, error_step = candidate, value, len(intro) + op_index
                break
        else:  # pragma: no cover - every scenario propagates errors
            raise RuntimeError(f"could not inject an error into {plan.problem!r}")
    conclusion = plan.conclusion.format(answer=format_number(answer))
    return DemoChain(
        problem=plan.problem,
        steps=(*intro, *steps, conclusion),
        answer=format_number(answer),
        reference_answer=format_number(reference),
        scenario=plan.scenario,
        injected_error_step=error_step,
    )


def generate_chains(
    *, count: int = 200, seed: int = 2024, error_rate: float = 0.3
) -> list[DemoChain]:
    """``count`` chains for distinct problems, ``round(count * error_rate)`` of them with one
    injected error. The same arguments give the same chains, byte for byte."""
    if count < 0 or not 0.0 <= error_rate <= 1.0:
        raise ValueError("count must be >= 0 and error_rate within [0, 1]")
    rng = random.Random(seed)
    with_error = set(rng.sample(range(count), k=round(count * error_rate)))
    seen: set[str] = set()
    chains: list[DemoChain] = []
    while len(chains) < count:
        plan = rng.choice(SCENARIOS)(rng)
        if plan.problem in seen:
            continue
        seen.add(plan.problem)
        chains.append(_chain(plan, with_error=len(chains) in with_error, rng=rng))
    return chains


def write_jsonl(chains: Iterable[DemoChain], path: str | Path) -> int:
    """Write the chains as generic JSONL records; returns the number written."""
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for chain in chains:
            out.write(json.dumps(chain.as_record(), ensure_ascii=False, sort_keys=True) + "\n")
            written += 1
    return written
