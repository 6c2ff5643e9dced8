"""Low-level helpers for kernels: a software prefetch of one array element.

FTRL training is bound by cache misses on the state arrays (random keys over
millions of slots). Asking the CPU to fetch the next rows' state while the
current row is computed hides much of that latency (measured ~1.3x on
power-law keys at 2**22 slots).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]


@intrinsic
def prefetch(typingctx, arr, index):
    """Hint the CPU to load ``arr[index]`` into cache (1-D arrays; no effect on results)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(index, types.Integer):
        return None
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # rw=1 (we will write), locality=3 (keep in all cache levels), data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
