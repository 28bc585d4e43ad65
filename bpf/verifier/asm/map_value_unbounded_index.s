# expect: reject out-of-bounds
# env: xdp
# map: table array 4 64 1
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
ldxw %r1, [%r0+0]
add %r0, %r1
ldxb %r0, [%r0+0]
exit
out:
mov %r0, 0
exit
