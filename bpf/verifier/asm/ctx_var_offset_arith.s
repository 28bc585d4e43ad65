# expect: reject pointer-arith
# env: socket_filter
ldxw %r2, [%r1+0]
add %r1, %r2
ldxw %r0, [%r1+0]
exit
