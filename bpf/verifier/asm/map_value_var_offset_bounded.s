# expect: accept
# env: xdp
# map: table array 4 64 1
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
call 7
mov %r1, %r0
and %r1, 0x38
lddw %r2, map:table
stw [%r10-4], 0
mov %r6, %r1
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
add %r0, %r6
ldxdw %r0, [%r0+0]
exit
out:
mov %r0, 0
exit
