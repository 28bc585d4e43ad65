# expect: reject out-of-bounds
# env: xdp
# ... but byte 15 is not.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 14
jge %r4, %r3, drop
ldxb %r0, [%r2+15]
mov %r0, 2
exit
drop:
mov %r0, 1
exit
