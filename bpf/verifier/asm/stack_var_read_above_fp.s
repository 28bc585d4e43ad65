# expect: reject out-of-bounds
# env: xdp
stdw [%r10-16], 1
stdw [%r10-8], 2
call 7
and %r0, 15
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxb %r0, [%r1+1]
exit
