"""The C calls that change a reached ``set``, noted in program order as ops an effect replays as C made them.

Note [A set's changes in program order]
A set iterates in the order of its hash table, which depends on the order its elements went in (and came
out: a discard leaves a dummy slot). The diff of a set's contents gave its added elements in the table's
order after the pass, not the program's: ``S.add(a); S.add(b); S.add(c)`` of numbers per call, or an add
and a discard, were replayed in another order, and iterating the set after some calls differed from eager
(/tmp/eff55-probes/set_order3.py; a removal replayed the whole contents, a new table). The pass notes each
C call that writes a reached set (``noted``, the elements as C got them: a stand-in for a number only
added, Note [An element only added]); where those ops, made on the set's first state, give the set the
pass left (``explains``: they account for every change), they are the effect, replayed in program order
onto the set each call finds (the ``"add"`` effect of jit/effects.py, its key each op and its count of
elements, ``perform``). Any other change (a settled stand-in, an op C made unseen, an iterator handed to
``update``) leaves the diff as before: the elements added, or the whole contents (a new table).

Note [A set's merges replayed as C makes them]
``s |= t``, ``s.update(t)``, ``s -= t``, ``s &= t``, ``s ^= t``, their named forms, ``s.pop()`` and
``s.clear()`` were "other" changes, replayed as the whole contents, and iterating the set after some calls
differed from eager's (/tmp/eff55-probes/set_left.py: ``s |= {...}`` at call 1, a pop at call 2). Each is
now an op replayed by the same C function on an argument that walks C through the same steps, since the
table it starts from is eager's (Note [A set's table put back exactly], jit/set_tables.py):
- ``update`` by a set or a dict: C resizes once for the whole merge, then adds each element of the other's
  table in its order; ``set.update`` of a dict of the same elements in that order does exactly that
  (``setobject.c``'s dict branch: the same resize rule, then ``set_add_entry`` in the dict's order). By a
  list or tuple: its elements one by one, as noted.
- ``difference_update``: discards (their order changes no slot) and the same resize rule after them.
- ``intersection_update``: C makes a new table, adding the elements of the smaller of the two (a set
  argument) in its order, or of the argument (any other), that the other holds. The replay computes that
  order on the set the call finds and hands it as a list: the same adds into a new table, swapped in.
- ``symmetric_difference_update``: discard-or-add of each element of the argument's table (a list's made
  into a set first) in its order: a dict of them in that order takes the same path.
- ``pop``: the element at the table's finger, which the replay onto eager's table finds again. Its value
  is the table's, not the contents': a program that reads it pops where another set of equal contents
  gives another element, which a guard on the contents does not see (/tmp/eff56-probes/pop_value.py:
  ``{1, 9}`` and ``{9, 1}``, jit returned 1 for both). So a pop whose result is not dropped at once
  (``popped_unread``) is refused for a reached set (an eager entry).
- ``clear``: back to the small table, as eager's.
Not covered: a merge into an empty set of the same table size as the other's copies the other's slots one
for one; the replay adds them in its order, which puts an element elsewhere only where the other's table
placed two elements after a probe jump past each other (no case seen).

Invariant: ``perform`` changes the set only by ``set``'s own C methods, one call per op in program order.
"""

from __future__ import annotations

from typing import Any

from jitcore.jit.set_tables import SetTable, arrange, filled, layout_of, next_popped, put_back

__all__ = ["OTHER", "SetOp", "effect_key", "explains", "noted", "perform", "popped_unread", "replay",
           "set_op"]

# (the op, its elements in the order C takes them, the layout of a set merged: ``set_tables.layout_of``)
SetOp = tuple[str, tuple, Any]
OTHER: SetOp = ("other", (), None)  # a change whose order is not known (the diff decides)

_WRITES = frozenset({"add", "discard", "remove", "update", "pop", "clear", "difference_update",
                     "intersection_update", "symmetric_difference_update", "__ior__", "__iand__",
                     "__isub__", "__ixor__"})
_MERGES = {"update": "update", "__ior__": "update", "difference_update": "difference_update",
           "__isub__": "difference_update", "intersection_update": "intersection_update",
           "__iand__": "intersection_update", "symmetric_difference_update": "symmetric_difference_update",
           "__ixor__": "symmetric_difference_update"}


def set_op(fn: Any, args: tuple) -> tuple[set, str, tuple] | None:
    """``(the set, the op, its arguments)`` where the C call ``fn(*args)`` writes a set (bound, or through
    ``set``), else None (Note [A set's changes in program order])."""
    name = getattr(fn, "__name__", None)
    if name not in _WRITES:
        return None
    owner = getattr(fn, "__self__", None)
    if type(owner) is set:
        return owner, name, args
    if getattr(set, name, None) is fn and args and type(args[0]) is set:
        return args[0], name, args[1:]
    return None


def noted(obj: set, op: str, args: tuple) -> list[SetOp]:
    """The ops the C call ``obj.<op>(*args)`` makes, about to run (Note [A set's merges replayed as C makes
    them]); ``[OTHER]`` where its order is not known."""
    if op in ("add", "discard", "remove"):
        return [("add" if op == "add" else "discard", (args[0],), None)] if len(args) == 1 else [OTHER]
    if op in ("pop", "clear"):
        if args:
            return [OTHER]
        if op == "clear":
            return [("clear", (), None)]
        found, element = next_popped(obj)
        return [("pop", (element,), None)] if found else [OTHER]
    kind = _MERGES[op]
    if op.startswith("__") and (len(args) != 1 or not isinstance(args[0], (set, frozenset))):
        return []  # C answers NotImplemented: the set is not changed here
    return [_merge(obj, kind, other) for other in args]


def _merge(obj: set, kind: str, other: Any) -> SetOp:
    if other is obj:  # ``s -= s`` empties it; ``s |= s`` changes nothing; ``s &= s`` copies the table
        return {"difference_update": ("clear", (), None), "symmetric_difference_update": ("clear", (), None),
                "update": ("update", (), None)}.get(kind, OTHER)
    if isinstance(other, (set, frozenset)):  # C walks the other's table
        walk = frozenset.__iter__ if isinstance(other, frozenset) else set.__iter__
        layout = layout_of(other) if kind == "update" else None  # copied slot for slot into an empty set
        return f"{kind}_sized", tuple(walk(other)), layout
    if type(other) is dict:  # its keys in its order; ``update`` and ``^=`` take the dict branch
        return (f"{kind}_sized" if kind != "intersection_update" else kind), tuple(dict.__iter__(other)), None
    if type(other) in (list, tuple):
        if kind == "symmetric_difference_update":  # C makes a set of them first and walks its table
            try:
                return f"{kind}_sized", tuple(set(other)), None
            except TypeError:  # unhashable: C raises before any change
                return kind, (), None
        return kind, tuple(other), None
    return OTHER  # an iterator (reading it here would consume it), a dict subclass (its Python __iter__)


def explains(old: set, new: set, ops: list[SetOp]) -> bool:
    """Whether ``ops`` made on ``old`` give ``new`` (compared as C compares the elements)."""
    made = set(old)
    if any(op == "other" for op, _elements, _layout in ops):
        return False
    try:
        for op, elements, _layout in ops:
            if op in ("add", "discard", "pop"):
                (made.add if op == "add" else made.discard)(elements[0])
            else:
                getattr(made, op.removesuffix("_sized"))(*((elements,) if op != "clear" else ()))
    except TypeError:  # an unhashable element: the op raised in the pass too
        return False
    return made == new


def effect_key(ops: list[SetOp]) -> tuple:
    """The key of the ``"add"`` effect of ``ops``: each op, its count of elements and its layout."""
    return tuple((op, len(elements), layout) for op, elements, layout in ops)


def perform(target: set, key: Any, value: list) -> None:
    """Replay ops onto ``target``: ``key`` (``effect_key``) holds each op, its count of elements and its
    layout, ``value`` the elements one after another (their numbers this call's); ``key`` None: each
    element added."""
    if key is None:
        for element in value:
            set.add(target, element)
        return
    at = 0
    for op, count, layout in key:
        elements, at = value[at:at + count], at + count
        if op == "add":
            set.add(target, elements[0])
        elif op == "discard":
            set.discard(target, elements[0])
        elif op == "pop":
            set.pop(target)
        elif op == "clear":
            set.clear(target)
        elif op == "update_sized" and layout is not None and filled(target) == 0:  # ``set_merge`` copies the
            set.update(target, dict.fromkeys(elements))  # other's slots into an empty table of its size
            arrange(target, layout, elements)
        elif op == "update_sized" or op == "symmetric_difference_update_sized":
            getattr(set, op.removesuffix("_sized"))(target, dict.fromkeys(elements))
        elif op == "intersection_update_sized":
            other = set(elements)
            order = [e for e in set.__iter__(target) if e in other] if len(other) > len(target) \
                else [e for e in elements if set.__contains__(target, e)]
            set.intersection_update(target, order)
        else:  # "update", "difference_update", "intersection_update", "symmetric_difference_update"
            getattr(set, op.removesuffix("_sized"))(target, elements)


# Note [A set's stand-ins settled in eager's place]
# A number only added to a set of state goes in as a stand-in (Note [An element only added],
# jit/pending_keys.py), and a later load of the set settles it: the stand-in was discarded and its number
# added. The discard left a dummy and the add probed past it, so the pass's table was not eager's: it
# iterated in another order, and a ``pop()`` after it took another element than eager's
# (/tmp/eff56-probes/settle_pop.py: order diverged at call 2). Where every change of the set since it was
# reached is a noted op (``OTHER`` none), ``replay`` puts its first table back and makes the ops again with
# each stand-in its number (hashed there, as the add would have hashed it), so the pass goes on with
# eager's table; the noted ops name the numbers from then on. Elsewhere the settle is as before.
def replay(obj: set, table: SetTable, ops: list[SetOp], noted_ops: list[SetOp]) -> bool:
    """Put ``obj``'s table ``table`` back and make ``ops`` on it again (Note [A set's stand-ins settled in
    eager's place]); ``noted_ops`` (the set's noted ops) then become ``ops``. Whether it could."""
    if any(op == "other" for op, _elements, _layout in ops) or not put_back(obj, table):
        return False
    perform(obj, effect_key(ops), [k for _op, each, _layout in ops for k in each])
    noted_ops[:] = ops
    return True


def popped_unread(frame: Any) -> bool:
    """Whether the result of the call the frame is making is dropped by the next instruction."""
    instructions = frame.info.instructions
    following = instructions[frame.index] if frame.index < len(instructions) else None
    return following is not None and following.opname == "POP_TOP"
