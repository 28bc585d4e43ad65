# expect: reject pointer-arith
# env: xdp
# map: counts hash 4 8 4
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
add %r0, 4
jeq %r0, 0, out
out:
mov %r0, 0
exit
