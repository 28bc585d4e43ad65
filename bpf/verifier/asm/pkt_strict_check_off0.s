# expect: reject out-of-bounds
# env: xdp
# `if (data >= data_end) goto drop` leaves byte 0 readable, not byte 1.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
jge %r2, %r3, drop
ldxb %r0, [%r2+0]
ldxb %r0, [%r2+1]
mov %r0, 2
exit
drop:
mov %r0, 1
exit
