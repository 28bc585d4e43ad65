# expect: reject pointer-arith
# env: xdp
lddw %r3, 0x8000000000000000
add %r1, %r3
ldxw %r0, [%r1-1]
exit
