# expect: accept
# env: socket_filter
# map: globals array 4 16 1
# A direct pointer into a one-entry array value (how clang reaches global variables).
lddw %r2, mapvalue:globals+8
ldxdw %r0, [%r2+0]
add %r0, 1
stxdw [%r2+0], %r0
mov %r0, 0
exit
