# expect: accept
# env: xdp
# map: counts hash 4 8 16
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
mov %r6, %r0
jne %r0, 0, have
mov %r0, 1
exit
have:
ldxdw %r0, [%r6+0]
exit
