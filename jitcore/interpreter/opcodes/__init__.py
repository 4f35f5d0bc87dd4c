"""Opcode handlers, one module per family; importing this package registers them all.

Every handler has the signature ``(frame: Frame, inst: Instruction) -> None | True`` (True: the frame
returns or yields) and is registered with ``@handles(OPNAME, since=...)``.
"""

from jitcore.interpreter.opcodes import (  # noqa: F401 - imported for their registrations
    build,
    calls,
    control,
    except_clauses,
    exceptions,
    fused,
    generators,
    intrinsics,
    load_store,
    match,
    operators,
    stack,
    superinstructions,
)
