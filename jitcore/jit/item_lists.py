"""Dict arguments whose lists the program only appends to: bound with their type and keys guarded, each such
list as a list argument only appended to (its type guarded), every other item as any argument's.

Which keys qualify is proved from the function's bytecode (``item_appended_parameters``, jit/appends.py):
constant keys, ``ANY_KEY`` (a computed key, whatever it is), and ``NestedLists`` (a dict set by default at
a constant key whose lists are set by default in turn). Invariant: the program's dict is a copy of the
caller's whose lists at those keys are the program's own (their appends replayed onto the caller's lists),
the copy's other changes replayed as a dict argument's; an item reached another way is bound whole.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from jitcore.jit.appends import ANY_KEY, NestedLists

if TYPE_CHECKING:
    from jitcore.jit.measured_lists import MeasuredLists

__all__ = ["bind_item_lists", "is_list_table"]


# Note [A dict of lists an argument]
# ``step(x, y, history)`` with ``history["loss"].append(loss.item())``: a dict argument was bound whole,
# each list's length and items guarded, so every call found longer lists and traced again (a training
# loop's history dict made every step a miss). A parameter the function's own bytecode only
# subscripts by constant keys to append to the item (``_items_appended``) reads nothing of those
# lists: the dict's type and keys are guarded, each list so appended to is bound as a list argument
# only appended to is (its type guarded, the appends replayed onto the call's list), and every other
# item as any argument. A list reached another way too is bound whole by a later pass (Note
# [Containers reached twice]). The dict's other items may be read (a training step's state dict,
# ``s["model"](x)``, ``s["opt"].step()``, ``s["log"].append(loss.item())``): each subscript by a constant
# key reads that item alone, bound as it would be in the dict bound whole; a key whose item is both read
# and appended to is read; so is a key stored at or updated in place (``s["n"] += 1``, ``s["n"] = v``:
# Note [An item updated in place]). Any other use of the parameter (iterated, passed on, a computed key)
# binds it whole, as before: that retraced on every call, the lists' lengths guarded.
# The same dict passed as two parameters (``f(h, h)``: one only appended through, the other measuring
# ``len(h2["log"])``) was two copies, and what one appended the other did not see (a wrong answer): the
# first binding is noted (``Provenance.enter_argument``), so the second is an alias guard and that copy.
# Note [A defaultdict of lists an argument]
# ``history = defaultdict(list)`` passed in, ``history["loss"].append(loss)``: the same proof as for a dict
# (Note [A dict of lists an argument]), but a defaultdict was bound whole (``type(value) is dict`` only),
# each list's length guarded: every call traced again (20 in 20: /tmp/eff53-probes/wide.py "defaultdict
# (list)"). A defaultdict whose ``default_factory`` is ``list`` (guarded by identity) is bound so too, the
# program's copy a ``defaultdict(list)``: an absent key's subscript makes the empty list in C, as eagerly,
# which the copy's diff stores on the caller's dict (an entry of its own, the keys guarded), a present one
# is a list only appended to.
def is_list_table(value: Any) -> bool:
    """Whether ``value`` is a dict or a ``defaultdict(list)`` (Note [A defaultdict of lists an argument])."""
    return type(value) is dict or type(value) is collections.defaultdict and value.default_factory is list


def bind_item_lists(provenance: Any, measured: MeasuredLists, value: dict, path: Any, name: str,
                    keys: frozenset, read_lists: frozenset) -> dict:
    """The dict argument ``value`` of a parameter only appended to through constant ``keys`` (Note [A
    dict of lists an argument]): the program's own dict, its appended lists its own."""
    provenance.guard(path, "type", type(value))
    if type(value) is collections.defaultdict:  # Note [A defaultdict of lists an argument]
        provenance.guard(path.attr("default_factory"), "identity", list)
    provenance.guard(path, "keys", tuple(value))
    provenance.reach_container(value, path)
    own: dict = {} if type(value) is dict else collections.defaultdict(list)
    provenance.enter_argument(value, path, own)  # the same dict passed again is this copy (Note above)
    for key, item in value.items():
        at = path.key(key)
        inner = frozenset(k.inner for k in keys if type(k) is NestedLists and k.key == key)
        if inner and is_list_table(item) and at not in read_lists:  # Note [Lists set by default in a dict set
            own[key] = bind_item_lists(provenance, measured, item, at, f"{name}_{key}", inner, read_lists)
        elif (key in keys or ANY_KEY in keys) and type(item) is list and at not in read_lists:  # by default]
            own[key] = measured.bind_argument(item, at)
        else:
            own[key] = provenance.bind_argument(item, at, f"{name}_{key}")
    provenance.argument_copies.append((own, path))
    return own
