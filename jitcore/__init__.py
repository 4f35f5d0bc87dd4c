"""jitcore: a JIT for PyTorch programs that resolves tensor subclasses while interpreting.

This module holds the public API only.
"""
