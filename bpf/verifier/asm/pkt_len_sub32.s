# expect: accept
# env: xdp
# `ctx->data_end - ctx->data` on `u32` fields, as clang emits it: a 32-bit subtraction of
# two packet pointers is an offset.
ldxw %r2, [%r1+4]
ldxw %r1, [%r1+0]
sub32 %r2, %r1
mov %r0, 1
jlt %r2, 14, out
mov %r0, 2
out:
exit
