# expect: accept
# env: xdp
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 2
jgt %r4, %r3, drop
sth [%r2+0], 0
drop:
mov %r0, 2
exit
