# expect: accept
# env: xdp
stdw [%r10-8], 0
mov %r1, %r10
add %r1, -8
call local fill
ldxdw %r0, [%r10-8]
exit
fill:
stdw [%r1+0], 42
mov %r0, 0
exit
