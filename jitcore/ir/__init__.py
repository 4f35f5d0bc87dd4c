"""The trace IR: proxies, symbols, bound symbols, traces, printing and compilation.

This package knows nothing of torch or of the jit: language contexts give it symbols and proxies.
"""

from jitcore.ir.codegen import compile_source, compile_trace, register_call_target
from jitcore.ir.context import TraceContext, current_context, in_subclass_code, tracing
from jitcore.ir.names import NameGenerator
from jitcore.ir.printer import PrintedTrace, print_trace, proxies_in, register_literal
from jitcore.ir.proxy import Proxy
from jitcore.ir.symbol import BoundSymbol, Inlined, SourceFrame, Symbol, SymbolTag, recorded_symbol
from jitcore.ir.trace import Trace, drop_unread, value_leaves, walk
from jitcore.ir.tree import tree_any, tree_has

__all__ = [
    "BoundSymbol",
    "Inlined",
    "NameGenerator",
    "PrintedTrace",
    "Proxy",
    "SourceFrame",
    "Symbol",
    "SymbolTag",
    "Trace",
    "TraceContext",
    "compile_source",
    "compile_trace",
    "register_call_target",
    "current_context",
    "drop_unread",
    "value_leaves",
    "in_subclass_code",
    "print_trace",
    "proxies_in",
    "recorded_symbol",
    "register_literal",
    "tracing",
    "tree_any",
    "tree_has",
    "walk",
]
