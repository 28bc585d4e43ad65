# expect: accept
# env: xdp
stdw [%r10-8], 1
stdw [%r10-16], 2
stdw [%r10-24], 3
stdw [%r10-32], 4
stdw [%r10-40], 5
stdw [%r10-48], 6
stdw [%r10-56], 7
stdw [%r10-64], 8
call 7
and %r0, 7
lsh %r0, 3
sub %r0, 56
mov %r1, %r10
add %r1, -8
add %r1, %r0
ldxdw %r0, [%r1+0]
exit
