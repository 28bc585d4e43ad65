# expect: accept
# env: xdp
stdw [%r10-8], 0
stdw [%r10-16], 0
stdw [%r10-24], 0
stdw [%r10-32], 0
call 7
and %r0, 3
lsh %r0, 3
mov %r1, %r10
add %r1, -32
add %r1, %r0
ldxdw %r0, [%r1+0]
jeq %r0, 0, out
ldxdw %r0, [%r10-64]
out:
exit
