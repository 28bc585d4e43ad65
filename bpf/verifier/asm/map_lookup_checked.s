# expect: accept
# env: xdp
# map: counts array 4 8 4
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
jeq %r0, 0, out
ldxdw %r1, [%r0+0]
add %r1, 1
stxdw [%r0+0], %r1
out:
mov %r0, 2
exit
