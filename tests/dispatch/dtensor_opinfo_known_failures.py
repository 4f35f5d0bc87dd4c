"""op_db entries of tests/dispatch/test_dtensor_opinfo.py's selection that do not match eager on DTensors
through jitcore.jit, each with the reason. A listed entry must still fail (the test says when it passes).
"""

_VALUE_READ = ("reads a value through DTensor's dispatch (``_local_scalar_dense``/``equal`` of the local "
               "tensor, C++ DTensor code between the program and the read): the call runs eagerly")

DTENSOR: dict[str, str] = {
    "item": _VALUE_READ,
    "equal": _VALUE_READ,
    "nn.functional.gaussian_nll_loss": _VALUE_READ + " (its ``torch.any(var < 0)`` check)",
}
