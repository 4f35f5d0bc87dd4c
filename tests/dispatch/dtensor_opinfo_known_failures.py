"""op_db entries of tests/dispatch/test_dtensor_opinfo.py's selection that do not match eager on DTensors
through jitcore.jit, each with the reason. A listed entry must still fail (the test says when it passes).
"""

DTENSOR: dict[str, str] = {}
