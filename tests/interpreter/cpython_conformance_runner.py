"""Run CPython's own regression tests natively and through ``interpret``; compare outcomes.

Used by test_cpython_conformance.py, and runnable by hand to see what fails::

    python tests/interpreter/cpython_conformance_runner.py test_grammar test_scope

For every TestCase method of a module: the class is run natively (setUpClass, setUp, method, tearDown,
tearDownClass), then again with setUp, the method and tearDown wrapped by ``interpret``. A method counts as
passing if it ran without failure, error or skip.
"""

from __future__ import annotations

import doctest
import importlib
import signal
import sys
import unittest
import warnings
from dataclasses import dataclass, field

from jitcore.interpreter import interpret, interpret_code

MODULES = (
    "test_grammar",
    "test_scope",
    "test_exceptions",
    "test_with",
    "test_contextlib",
    "test_patma",
    "test_class",
    "test_listcomps",
    "test_genexps",
    "test_generators",
    "test_keywordonlyarg",
    "test_positional_only_arg",
    "test_unpack_ex",
    "test_augassign",
    "test_raise",
    "test_except_star",
    "test_super",
    "test_property",
    "test_decorators",
    "test_dataclasses",
    # operators, comprehensions, iteration, functions, async: added 2026-11-30
    "test_opcodes",
    "test_unary",
    "test_binop",
    "test_compare",
    "test_named_expressions",
    "test_dictcomps",
    "test_fstring",
    "test_iter",
    "test_enumerate",
    "test_sort",
    "test_slice",
    "test_funcattrs",
    "test_isinstance",
    "test_bool",
    "test_string_literals",
    "test_contextlib_async",
    "test_asyncgen",
    "test_typechecks",
    "test_int_literal",
    "test_global",
    # builtin containers and protocols: added 2026-12-01 (test_userlist found str + UserList's order)
    "test_list",
    "test_userlist",
    "test_userdict",
    "test_defaultdict",
    "test_operator",
    "test_string",
    "test_abc",
    # calls, globals, exceptions: added 2026-12-02 (test_dynamic found builtins.len replaced breaking the
    # interpreter's decoding; test_call found lookasides' own argument errors)
    "test_call",
    "test_dynamic",
    "test_exception_group",
    "test_exception_variations",
    "test_baseexception",
    "test_dictviews",
    "test_contains",
    # generators' delegation and frames, hashing, __index__, modules, generic aliases: added 2026-12-02
    "test_yield_from",
    "test_index",
    "test_hash",
    "test_module",
    "test_genericalias",
    # descriptors, class creation, coroutines, calls, typing, builtins: added 2026-12-02 (found the per-type
    # caches keeping classes alive, a class attribute looked up twice, FunctionType(module code) without
    # locals, frame proxies' identity, finished generators' code, ABCMeta.register's frame, and on 3.13
    # eval/exec keywords, super's isinstance, TypeVar's module)
    "test_descr",
    "test_descrtut",
    "test_subclassinit",
    "test_coroutines",
    "test_functools",
    "test_types",
    "test_richcmp",
    "test_enum",
    "test_extcall",
    "test_setcomps",
    "test_unpack",
    "test_builtin",
    "test_syntax",
    "test_typing",
    *(("test_type_params", "test_type_aliases") if sys.version_info >= (3, 12) else ()),
)

TIMEOUT_S = 20


@dataclass
class Outcome:
    """What happened to one module's tests."""

    native_pass: set[str] = field(default_factory=set)
    interpreted_pass: set[str] = field(default_factory=set)
    interpreted_errors: dict[str, str] = field(default_factory=dict)


class _Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _Timeout(f"test took more than {TIMEOUT_S}s interpreted")


def _test_classes(module: object) -> list[type]:
    out = []
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, unittest.TestCase)
            and value.__module__ == module.__name__
        ):
            out.append(value)
    return out


def _suite(cls: type, interpreted: bool) -> unittest.TestSuite:
    tests = unittest.TestLoader().loadTestsFromTestCase(cls)
    suite = unittest.TestSuite()
    for test in tests:
        if interpreted:
            name = test._testMethodName
            setattr(test, name, interpret(getattr(test, name)))
            test.setUp = interpret(test.setUp)
            test.tearDown = interpret(test.tearDown)
        suite.addTest(test)
    return suite


class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.passed: set[str] = set()
        self.problems: dict[str, str] = {}

    def addSuccess(self, test: unittest.TestCase) -> None:
        self.passed.add(test.id())

    def addError(self, test: unittest.TestCase, err: tuple) -> None:
        self.problems[test.id()] = f"{err[0].__name__}: {str(err[1])[:300]}"

    def addFailure(self, test: unittest.TestCase, err: tuple) -> None:
        self.problems[test.id()] = f"{err[0].__name__}: {str(err[1])[:300]}"

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: tuple | None) -> None:
        if err is not None:
            self.problems[test.id()] = f"{err[0].__name__}: {str(err[1])[:300]}"


def _run_suite(suite: unittest.TestSuite, timeout: bool) -> _Result:
    result = _Result()
    old = signal.signal(signal.SIGALRM, _on_alarm) if timeout else None
    try:
        for test in suite:
            single = unittest.TestSuite([test])
            if timeout:
                signal.alarm(TIMEOUT_S)
            try:
                single.run(result)
            finally:
                if timeout:
                    signal.alarm(0)
        # class fixtures: run tearDownClass of the last class
        unittest.TestSuite()._tearDownPreviousClass(None, result)
    finally:
        if timeout:
            signal.signal(signal.SIGALRM, old)
    return result


DOCTEST_MODULES = ("test_listcomps", "test_genexps", "test_unpack_ex", "test_extcall", "test_setcomps",
                   "test_unpack", "test_descrtut", "test_syntax")


def _exec_interpreted(code: object, global_ns: dict, local_ns: object = None) -> None:
    interpret_code(code, global_ns, local_ns)


class _ExampleRunner(doctest.DocTestRunner):
    """Records each doctest example as its own test, named by the docstring and the example's line."""

    def __init__(self, name: str, passed: set[str], problems: dict[str, str]) -> None:
        super().__init__(verbose=False, optionflags=doctest.ELLIPSIS)
        self._name, self._passed, self._problems = name, passed, problems

    def _id(self, example: doctest.Example) -> str:
        return f"doctest:{self._name}:{example.lineno}"

    def report_success(self, out: object, test: object, example: doctest.Example, got: str) -> None:
        self._passed.add(self._id(example))

    def report_failure(self, out: object, test: object, example: doctest.Example, got: str) -> None:
        self._problems[self._id(example)] = f"got {got[:200]!r}, expected {example.want[:100]!r}"

    def report_unexpected_exception(self, out: object, test: object, example: doctest.Example,
                                    exc_info: tuple) -> None:
        self._problems[self._id(example)] = f"{exc_info[0].__name__}: {str(exc_info[1])[:200]}"


def _run_doctests(module: object, interpreted: bool) -> tuple[set[str], dict[str, str]]:
    passed: set[str] = set()
    problems: dict[str, str] = {}
    saved = vars(doctest).get("exec")
    if interpreted:
        doctest.exec = _exec_interpreted  # doctest's runner calls exec(compile(example), globs)
    try:
        for test in doctest.DocTestFinder().find(module):
            runner = _ExampleRunner(test.name, passed, problems)
            runner.run(test, out=lambda text: None)
    finally:
        if saved is None:
            vars(doctest).pop("exec", None)
        else:
            doctest.exec = saved
    return passed, problems


def run_module(name: str) -> Outcome:
    """Run ``test.<name>`` natively and interpreted (its doctests too, for doctest-only modules)."""
    module = importlib.import_module(f"test.{name}")
    outcome = Outcome()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in DOCTEST_MODULES:
            outcome.native_pass |= _run_doctests(module, interpreted=False)[0]
            passed, problems = _run_doctests(module, interpreted=True)
            outcome.interpreted_pass |= passed
            outcome.interpreted_errors.update(problems)
        for cls in _test_classes(module):
            native = _run_suite(_suite(cls, interpreted=False), timeout=False)
            outcome.native_pass |= {t for t in native.passed if t not in native.problems}
            interpreted = _run_suite(_suite(cls, interpreted=True), timeout=True)
            outcome.interpreted_pass |= {t for t in interpreted.passed if t not in interpreted.problems}
            outcome.interpreted_errors.update(interpreted.problems)
    return outcome


def run_module_isolated(name: str, timeout_s: float = 900) -> Outcome:
    """``run_module`` in a fresh interpreter process, so the CPython tests' global side effects (warnings
    filters, signal handlers, sys.modules, ...) cannot leak into the caller."""
    import json
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--json", name], capture_output=True,
                          text=True, timeout=timeout_s, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"conformance run of {name} failed (rc={proc.returncode}): {proc.stderr[-2000:]}")
    data = json.loads(lines[-1])
    return Outcome(set(data["native_pass"]), set(data["interpreted_pass"]), data["interpreted_errors"])


def main(argv: list[str]) -> None:
    """Print each module's pass rate and the natively passing tests that fail interpreted."""
    if argv[:1] == ["--json"]:
        import json

        outcome = run_module(argv[1])
        print(json.dumps({"native_pass": sorted(outcome.native_pass),
                          "interpreted_pass": sorted(outcome.interpreted_pass),
                          "interpreted_errors": outcome.interpreted_errors}))
        return
    total_native = total_both = 0
    for name in argv or MODULES:
        outcome = run_module(name)
        both = outcome.native_pass & outcome.interpreted_pass
        total_native += len(outcome.native_pass)
        total_both += len(both)
        rate = len(both) / max(len(outcome.native_pass), 1)
        print(f"{name}: {len(both)}/{len(outcome.native_pass)} = {rate:.1%}", flush=True)
        for test in sorted(outcome.native_pass - outcome.interpreted_pass):
            print(f"    {test!r}: {outcome.interpreted_errors.get(test, 'did not pass')!r},", flush=True)
    print(f"TOTAL: {total_both}/{total_native} = {total_both / max(total_native, 1):.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
