# expect: accept
# env: xdp
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r0, %r3
sub %r0, %r2
and %r0, 0xff
exit
