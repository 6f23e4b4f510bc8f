"""Rewriting one function of a program: who reads each value, fresh names, new ops and consts,
replacing a value everywhere, removing ops; the order is settled once, at `commit`.

A pass works on an `Editor` over a copy of the program (`copy_program`), so the program as built
stays as it was: verification composes the graph's meaning from it. Readers of each value are
kept up to date by every edit, so a pass sees the graph it has made so far; new ops are placed
just before the op named as their anchor, and removed ops dropped, at `commit` (after each pass,
or within one that walks the result again). A rewrite that keeps an op's outputs' types may renew
the op in place (`renew`, `move`) instead of making another: it is reported as replaced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet

import numpy as np

from app.language.targets import Target
from app.mil.ir import ConstValue, Function, Input, Operation, Program, Var
from app.mil.types import DType, TensorType
from app.passes import facts


def _vars(value: Input) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)


class Editor:
    """One function being rewritten, by one pass after another (the runner resets `changed`,
    which says whether the pass changed anything). Passes edit through it only (reordering
    `fn.operations` aside), so that who reads what stays true from pass to pass."""

    def __init__(self, fn: Function, target: Target):
        self.fn, self.target = fn, target
        self.changed = False
        self.rewired = False  # an argument rewired (set_input): reported when nothing else is
        self._readers: dict[Var, list[Operation]] = {}  # ops reading each value (per argument)
        self._removed: set[Operation] = set()  # kept after commit: ops() may still list them
        self._dirty = False  # edits not yet written into the order
        self._before: dict[Operation, list[Operation]] = {}  # anchor -> ops placed before it
        self._moving: set[Operation] = set()  # ops placed elsewhere (`move`), until commit
        # ops rewritten in place since the runner last reset it, with their (type, name) before:
        # reported as replaced (`renew`)
        self.renewed: dict[Operation, tuple[str, str]] = {}
        self._outputs = set(fn.outputs)
        self._inputs = set(fn.inputs)
        # holders of each name (ops and values): a removed op's names are free again
        self._names: dict[str, int] = dict(Counter(v.name for v in fn.inputs))
        self._types: dict[str, int] = {}  # ops of each type the function holds (none: no key)
        for op in fn.operations:
            self._hold(op, 1)
            self._read(op)

    # -- reading -------------------------------------------------------------------------------
    def ops(self, *types: str) -> Iterator[Operation]:
        """The ops in their order when the walk begins (of the given types), skipping those
        removed since; ops made meanwhile are not in it (until `commit`)."""
        if types:
            return self.ops_among(frozenset(types))
        return self._walk(list(self.fn.operations))

    def ops_among(self, types: AbstractSet[str]) -> Iterator[Operation]:
        """`ops` of the types in a set (a pass that looks at a few kinds of op, not at every
        const: the walk picks them out in one comprehension)."""
        return self._walk([op for op in self.fn.operations if op.type in types])

    def _walk(self, snapshot: list[Operation]) -> Iterator[Operation]:
        removed = self._removed
        for op in snapshot:
            if op not in removed:
                yield op

    def readers(self, var: Var) -> list[Operation]:
        """The ops reading `var`, each once, in the order they started reading it."""
        return list(dict.fromkeys(self._readers.get(var, ())))

    def is_output(self, var: Var) -> bool:
        return var in self._outputs

    def is_input(self, var: Var) -> bool:
        return var in self._inputs

    def sole_reader(self, var: Var) -> Operation | None:
        """The one op reading `var` when nothing else does (no other op, not a function output):
        the condition for folding the op that makes `var` into that reader."""
        readers = self._readers.get(var)
        if not readers or var in self._outputs:
            return None
        first = readers[0]
        return first if all(r is first for r in readers) else None

    def used(self, var: Var) -> bool:
        return bool(self._readers.get(var)) or self.is_output(var)

    def removed(self, op: Operation) -> bool:
        return op in self._removed

    # -- names ---------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A name no op or value of the function holds (base, base_1, base_2, ...); it is taken
        when an op is made with it."""
        name, i = base, 0
        while self._names.get(name, 0) > 0:
            i += 1
            name = f"{base}_{i}"
        return name

    # -- making --------------------------------------------------------------------------------
    def const(
        self,
        name: str,
        value: np.ndarray | str,
        dtype: DType,
        before: Operation,
        *,
        fresh: bool = True,
    ) -> Var:
        """A new const holding `value` rounded once to `dtype` (a string: a string const),
        placed before `before`; named `name`, made unique unless `fresh` is False (the name of
        the op it replaces). A value in `dtype` already is held as given, not copied: a view of
        another const's array (a weight transposed) shares its memory with it, which the
        program as built keeps alive beside this one (const arrays are never written in
        place)."""
        op = Operation("const", self.fresh(name) if fresh else name, {}, [])
        if isinstance(value, str):
            op.value = ConstValue(value, TensorType(DType.STRING, ()))
        else:
            array = np.asarray(value).astype(dtype.numpy, copy=False)
            op.value = ConstValue(array, TensorType(dtype, tuple(array.shape)))
        op.outputs.append(Var(op.name, op.value.type, op))
        self._hold(op, 1)
        self._place(op, before)
        return op.output

    def const_for(
        self,
        var: Var,
        reader: Operation,
        name: str,
        value: np.ndarray,
        dtype: DType,
        before: Operation,
        *,
        fresh: bool = True,
    ) -> Var:
        """A const holding `value` for `reader` to read in place of `var`, as `const` makes it;
        when `var` is a const `reader` alone reads, that const is renewed in place instead (its
        value, name and place): the caller rewires nothing."""
        const = var.op
        if (
            const is None
            or const.type != "const"
            or var in self._outputs
            or any(r is not reader for r in self._readers.get(var, ()))
        ):
            return self.const(name, value, dtype, before, fresh=fresh)
        name = self.fresh(name) if fresh and name != const.name else name
        array = np.asarray(value).astype(dtype.numpy, copy=False)
        self.renew(const, name=name)
        self.rename(var, name)
        const.value = ConstValue(array, TensorType(dtype, tuple(array.shape)))
        var.type = const.value.type
        self.move(const, before)
        return var

    def op(
        self,
        op_type: str,
        name: str,
        inputs: Mapping[str, Input],
        before: Operation,
        out: list[str] | None = None,
    ) -> Operation:
        """A new op placed before `before`, its outputs typed by the op's own inference and named
        `out` (by default the op's name, `<name>_<i>` for several). `name` may be the name of an
        op this one replaces."""
        types = facts.output_types(op_type, name, inputs, self.target)
        if out is None:
            out = [name] if len(types) == 1 else [f"{name}_{i}" for i in range(len(types))]
        op = Operation(op_type, name, dict(inputs), [])
        op.outputs = [Var(n, t, op) for n, t in zip(out, types, strict=True)]
        self._hold(op, 1)
        self._place(op, before)
        self._read(op)
        return op

    def move(self, op: Operation, before: Operation) -> None:
        """Place an op of the function just before `before` (at commit), after what is placed
        there already."""
        self._moving.add(op)
        self._place(op, before)

    def renew(self, op: Operation, *, op_type: str | None = None, name: str | None = None) -> None:
        """Rewrite `op` in place: another type or name, and whatever arguments the caller rewires
        (`set_input`). Reported as the op it was replaced by the op it is (as `swap` would), at
        the cost of an edit, not of a new op. The caller keeps the outputs' types as they were
        (a type that reads differently is a new op: `swap`)."""
        self.renewed.setdefault(op, (op.type, op.name))
        if op_type is not None and op_type != op.type:
            self._count_type(op.type, -1)
            self._count_type(op_type, 1)
            op.type = op_type
        if name is not None and name != op.name:
            self.rename(op, name)
        self.changed = True

    def _place(self, op: Operation, before: Operation) -> None:
        self._before.setdefault(before, []).append(op)
        self.changed = self._dirty = True

    # -- changing ------------------------------------------------------------------------------
    def can_replace(self, old: Var, new: Var) -> bool:
        """Whether every reader of `old` may read `new` instead. A function output keeps its name:
        `new` takes it, so it must be made by an op here (not a function input, not a const) and
        not be an output already."""
        if not self.is_output(old):
            return True
        return (
            new.op is not None
            and new.op.type != "const"
            and not self.is_input(new)
            and not self.is_output(new)
        )

    def replace(self, old: Var, new: Var) -> bool:
        """Every reader of `old` reads `new` (and `new` takes `old`'s place among the outputs, with
        its name); False, changing nothing, when that is not allowed (`can_replace`)."""
        if old is new:
            return True
        if not self.can_replace(old, new):
            return False
        for op in self.readers(old):
            for arg, value in op.inputs.items():
                if isinstance(value, tuple):
                    if any(v is old for v in value):
                        op.inputs[arg] = tuple(new if v is old else v for v in value)
                elif value is old:
                    op.inputs[arg] = new
        moved = self._readers.pop(old, [])
        self._readers.setdefault(new, []).extend(moved)
        if self.is_output(old):
            assert new.op is not None
            if new.op.name == new.name and len(new.op.outputs) == 1:
                self.rename(new.op, old.name)
            self.rename(new, old.name)
            self.fn.outputs = [new if v is old else v for v in self.fn.outputs]
            self._outputs.discard(old)
            self._outputs.add(new)
        self.changed = True
        return True

    def set_input(self, op: Operation, arg: str, value: Input) -> None:
        """Rewire one argument of `op`."""
        self._unread(op, arg)
        op.inputs[arg] = value
        for v in _vars(value):
            self._readers.setdefault(v, []).append(op)
        self.changed = self.rewired = True

    def remove(self, *ops: Operation) -> None:
        """Drop ops (their outputs must be unused by then, or be used only by ops removed too)."""
        for op in ops:
            if op in self._removed:
                continue
            self._removed.add(op)
            self._hold(op, -1)
            for arg in list(op.inputs):
                self._unread(op, arg)
        self.changed = self._dirty = True

    def remove_if_unused(self, *ops: Operation | None) -> None:
        """Drop those of `ops` (in order) whose outputs nothing reads: the leftovers of a fusion
        (None, a function input's missing producer, is skipped)."""
        for op in ops:
            if (
                op is not None
                and not any(self.used(v) for v in op.outputs)
                and not facts.is_stateful(op.type)
            ):
                self.remove(op)

    def has(self, types: frozenset[str]) -> bool:
        """Whether the function holds an op of one of these types."""
        return not types.isdisjoint(self._types)

    # -- the usual rewrites -----------------------------------------------------------------------
    def swap(self, old: Operation, op_type: str, inputs: Mapping[str, Input]) -> Operation:
        """A new op in `old`'s place: its name, its outputs' names and their readers; `old` is
        dropped (with the consts only it read)."""
        new = self.op(op_type, old.name, inputs, old, out=[v.name for v in old.outputs])
        for before, after in zip(old.outputs, new.outputs, strict=True):
            self.replace(before, after)
        self.drop(old)
        return new

    def merge_into(self, op: Operation, kept: list[Var]) -> bool:
        """`op` computes what `kept` holds already: its readers read `kept`, and it is dropped;
        False, changing nothing, when an output of it cannot be replaced (`can_replace`)."""
        pairs = list(zip(op.outputs, kept, strict=True))
        if not all(self.can_replace(old, new) for old, new in pairs):
            return False
        for old, new in pairs:
            self.replace(old, new)
        self.drop(op)
        return True

    def drop(self, *ops: Operation) -> None:
        """Remove ops a rewrite replaced, then the consts only they read."""
        self.remove(*ops)
        for op in ops:
            for value in op.inputs.values():
                for v in _vars(value):
                    const = v.op
                    if (
                        const is not None
                        and const.type == "const"
                        and const not in self._removed
                        and not self.used(v)
                    ):
                        self.remove(const)

    def repeat(self, sweep: Callable[[Editor], bool]) -> None:
        """Run `sweep` until it changes nothing (a fusion can expose the next one)."""
        while sweep(self):
            self.commit()

    def _hold(self, op: Operation, count: int) -> None:
        self._count_type(op.type, count)
        names = self._names
        names[op.name] = names.get(op.name, 0) + count
        for v in op.outputs:
            names[v.name] = names.get(v.name, 0) + count

    def _count_type(self, op_type: str, count: int) -> None:
        types = self._types
        held = types.get(op_type, 0) + count
        if held:
            types[op_type] = held
        else:
            del types[op_type]

    def rename(self, thing: Operation | Var, name: str) -> None:
        """Give an op or a value another name (the caller keeps names unique)."""
        names = self._names
        names[thing.name] -= 1
        names[name] = names.get(name, 0) + 1
        thing.name = name
        self.changed = True

    def _read(self, op: Operation) -> None:
        for value in op.inputs.values():
            for v in _vars(value):
                self._readers.setdefault(v, []).append(op)

    def _unread(self, op: Operation, arg: str) -> None:
        value = op.inputs.get(arg)
        if value is None:
            return
        for v in _vars(value):
            readers = self._readers.get(v)
            if readers and op in readers:
                readers.remove(op)

    # -- settling ------------------------------------------------------------------------------
    def commit(self) -> None:
        """Write the order: new ops just before their anchors (an anchor removed meanwhile still
        places them), removed ops gone."""
        if not self._dirty:
            return
        order: list[Operation] = []
        moving = self._moving

        def place(op: Operation, anchored: bool = False) -> None:
            if op in moving and not anchored:  # placed where it moved to (and what is before it)
                return
            for new in self._before.pop(op, ()):
                place(new, True)
            if op not in self._removed:
                order.append(op)

        for op in self.fn.operations:
            place(op)
        assert not self._before, "a new op anchored to an op outside the function"
        self.fn.operations = order
        moving.clear()
        self._dirty = False


def copy_program(program: Program) -> Program:
    """The program with every op and value its own (const values shared: they are never
    changed in place)."""
    return Program(
        program.target,
        {name: copy_function(fn) for name, fn in program.functions.items()},
        program.default,
    )


def copy_function(fn: Function) -> Function:
    mapped: dict[int, Var] = {}

    def new_var(v: Var, op: Operation | None) -> Var:
        copy = Var(v.name, v.type, op)
        mapped[id(v)] = copy
        return copy

    inputs = [new_var(v, None) for v in fn.inputs]
    ops = []
    for op in fn.operations:
        args: dict[str, Input] = {
            arg: tuple(mapped[id(v)] for v in value)
            if isinstance(value, tuple)
            else mapped[id(value)]
            for arg, value in op.inputs.items()
        }
        copy = Operation(op.type, op.name, args, [], op.value)
        copy.outputs = [new_var(v, copy) for v in op.outputs]
        ops.append(copy)
    return Function(fn.name, inputs, ops, [mapped[id(v)] for v in fn.outputs])
