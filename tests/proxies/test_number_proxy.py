"""NumberProxy made without its ``__init__`` (``object.__new__``, as ``type(n)(value)`` makes one)."""

from __future__ import annotations

import pytest

from jitcore.proxies.number import NumberProxy


@pytest.mark.parametrize("name", ["value", "roots", "made_by", "real"])
def test_an_empty_number_proxy_has_no_attributes(name: str) -> None:
    # its __getattr__ asked type(self.value), which asked __getattr__ again: the recursion overflowed the C
    # stack (test_statistics jitted, rc 139) where an AttributeError is raised now
    empty = object.__new__(NumberProxy)
    with pytest.raises(AttributeError):
        getattr(empty, name)
