# expect: reject pointer-arith
# env: xdp
# map: t array 4 64 1
# A map-value offset walked to -2^29 in steps is refused at the step that reaches it.
lddw %r1, mapvalue:t+0
add %r1, 0x1fffffff
sub %r1, 0x1fffffff
sub %r1, 0x1fffffff
add %r1, -1
ldxb %r0, [%r1+0]
mov %r0, 2
exit
