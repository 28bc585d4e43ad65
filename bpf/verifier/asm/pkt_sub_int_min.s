# expect: reject pointer-arith
# env: xdp
ldxw %r2, [%r1+0]
lddw %r3, 0x8000000000000000
sub %r2, %r3
ldxb %r0, [%r2+0]
exit
