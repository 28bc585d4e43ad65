# expect: reject out-of-bounds
# env: xdp
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 4
jle %r4, %r3, drop
ldxw %r0, [%r2+0]
exit
drop:
mov %r0, 1
exit
