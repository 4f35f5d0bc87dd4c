"""CPython regression tests that pass natively but not under ``interpret``, each with the reason, per
Python version (each version runs its own stdlib's test modules).

test_cpython_conformance.py checks that every entry still fails (remove an entry when it starts passing)
and that nothing else fails.
"""

import sys

KNOWN_FAILURES_311: dict[str, str] = {
    # --- frames: interpreted frames are not CPython frame objects
    "test.test_exceptions.ExceptionTests.testSettingException":
        "inspects the native frame of an exception raised from __init__ called by C code",
    "test.test_exceptions.ExceptionTests.test_recursion_in_except_handler":
        "each interpreted call uses several native frames, so RecursionError comes at a different depth",
    "test.test_raise.TestTracebackType.test_attrs": "sys._getframe() returns a frame proxy, "
        "which is not the frame object of the traceback entry",
    "test.test_raise.TestTracebackType.test_constructor": "sys._getframe() returns a frame proxy, "
        "which types.TracebackType does not accept",
    # --- builtins seen through the interpreter's lookasides
    "test.test_iter.TestCase.test_reduce_mutating_builtins_iter":
        "replaces builtins.iter from inside __reduce__; the interpreter's iter() is its lookaside, "
    "not the builtins module's current entry",
    "test.test_richcmp.MiscTest.test_recursion":
        "runs under support.infinite_recursion(), a recursion limit of 100 frames above the test's, which "
        "the interpreter's native frames for the test's own calls exceed",
    # --- coroutine origins: recorded by CPython from the native frames that create the coroutine
    "test.test_coroutines.OriginTrackingTest.test_origin_tracking":
        "cr_origin of an interpreted coroutine lists the interpreter's native frames (its driver's creation)",
    "test.test_coroutines.OriginTrackingTest.test_origin_tracking_warning":
        "the 'never awaited' warning reads cr_origin natively, which lists the interpreter's native frames",
    "test.test_traceback.CExcReportingTests.test_KeyboardInterrupt_at_first_line_of_frame":
        "sys._getframe() returns a frame proxy, which types.TracebackType does not accept",
    "test.test_traceback.PyExcReportingTests.test_KeyboardInterrupt_at_first_line_of_frame":
        "sys._getframe() returns a frame proxy, which types.TracebackType does not accept",
    "test.test_traceback.TestTracebackException.test_print":
        "capture_locals of a frame that handled its own exception and runs on: its traceback entry's frame "
        "holds no locals (values taken at the raise would outlive the frame's own rebinding of them)",
    # --- recursion depth: each interpreted call takes several native frames
    "test.test_traceback.TestTracebackException.test_long_context_chain":
        "each interpreted call uses several native frames: a handler recursing ends in RecursionError after "
        "~490 chained exceptions, not the more than 500 the test asks",
    "test.test_traceback.TracebackFormatTests.test_recursive_traceback_python":
        "each interpreted call uses several native frames: unbounded recursion's traceback repeats its line "
        "~485 times, not the 940-1000 the test asks",
    "test.test_traceback.TracebackFormatTests.test_recursive_traceback_cpython_internal":
        "each interpreted call uses several native frames: unbounded recursion's traceback repeats its line "
        "~485 times, not the 940-1000 the test asks",
    # --- C code reading its Python caller: the innermost native frame, the interpreter's
    "test.test_warnings.CFilterTests.test_ignore":
        "warn() of a _warnings module imported afresh (import_fresh_module) is not the builtin the warnings "
        "lookaside is keyed by: it runs natively, and its once-per-location registry is keyed by the "
        "interpreter's line (the file and line it shows are the interpreted frame's: Note [Warnings issued "
        "by C code])",
    "test.test_sys_setprofile.TestEdgeCases.test_reentrancy":
        "the replaced profile function's __del__ calls sys.setprofile(), which CPython refuses while it "
        "replaces one (an unraisable RuntimeError); interpreted, the replacement is the interpreter's, and "
        "that __del__, run natively, installs a native profile function",
    # --- the interpreter's own objects
    "test.test_descr.ClassPropertiesAndMethods.test_slots":
        "counts gc.get_objects() around the first interpreted call of a Python __eq__, which decodes its "
        "code object and keeps the decoded instructions (objects the GC tracks) for the next calls",
}

# The same differences on 3.13.
_SAME_ON_313 = (
    "test.test_exceptions.ExceptionTests.testSettingException",
    "test.test_exceptions.ExceptionTests.test_recursion_in_except_handler",
    "test.test_raise.TestTracebackType.test_attrs",
    "test.test_raise.TestTracebackType.test_constructor",
    "test.test_iter.TestCase.test_reduce_mutating_builtins_iter",
    "test.test_coroutines.OriginTrackingTest.test_origin_tracking",
    "test.test_coroutines.OriginTrackingTest.test_origin_tracking_warning",
    "test.test_descr.ClassPropertiesAndMethods.test_slots",
    "test.test_warnings.CFilterTests.test_ignore",
)
KNOWN_FAILURES_313: dict[str, str] = {
    **{name: KNOWN_FAILURES_311[name] for name in _SAME_ON_313},
    **dict.fromkeys(
        (
            "test.test_call.TestPEP590.test_setvectorcall",
            "test.test_call.TestPEP590.test_setvectorcall_load_attr_specialization_deopt",
            "test.test_call.TestPEP590.test_setvectorcall_load_attr_specialization_skip",
        ),
        "_testcapi.function_setvectorcall replaces a function's C vectorcall; the interpreter runs the "
        "function's bytecode, not its vectorcall",
    ),
    "test.test_call.TestRecursion.test_super_deep":
        "each interpreted call uses several native frames, so RecursionError comes at a different depth",
    "test.test_warnings.CWarnTests.test_skip_file_prefixes":
        "warn() of a _warnings module imported afresh (import_fresh_module) is not the builtin the warnings "
        "lookaside is keyed by: it runs natively and blames the interpreter's frame",
    "test.test_bdb.StateTestCase.test_stepinstr":
        "3.13 gives opcode events for f_trace_opcodes that bdb sets in its trace function (sys.monitoring); "
        "the interpreter gives 3.11's, where a flag set there gives none on 3.12+",
    "test.test_types.SubinterpreterTests.test_static_types_inherited_slots":
        "decorated @no_rerun: it skips itself when run a second time in the process (interpreted after "
        "native)",
}

# 3.12: the modules test_cpython_conformance.py runs there (NATIVE_COUNTS_312), measured on pyenv's 3.12.1
# and its stdlib tests: what fails is what fails on 3.11 or 3.13, for the same reasons
KNOWN_FAILURES_312: dict[str, str] = {
    name: KNOWN_FAILURES_311.get(name) or KNOWN_FAILURES_313[name]
    for name in (
        "test.test_exceptions.ExceptionTests.testSettingException",
        "test.test_exceptions.ExceptionTests.test_recursion_in_except_handler",
        "test.test_coroutines.OriginTrackingTest.test_origin_tracking",
        "test.test_coroutines.OriginTrackingTest.test_origin_tracking_warning",
        "test.test_call.TestPEP590.test_setvectorcall",
        "test.test_call.TestPEP590.test_setvectorcall_load_attr_specialization_deopt",
        "test.test_call.TestPEP590.test_setvectorcall_load_attr_specialization_skip",
        "test.test_call.TestRecursion.test_super_deep",
        "test.test_descr.ClassPropertiesAndMethods.test_slots",
        "test.test_richcmp.MiscTest.test_recursion",
        "test.test_raise.TestTracebackType.test_attrs",
        "test.test_raise.TestTracebackType.test_constructor",
        "test.test_iter.TestCase.test_reduce_mutating_builtins_iter",
    )
}

KNOWN_FAILURES: dict[str, str] = {
    (3, 11): KNOWN_FAILURES_311, (3, 12): KNOWN_FAILURES_312, (3, 13): KNOWN_FAILURES_313
}[sys.version_info[:2]]
