# expect: reject pointer-arith
# env: xdp
# i64::MIN added to a packet pointer: the offset's magnitude used to wrap, and the load
# below was accepted with no bounds check at all.
ldxw %r2, [%r1+0]
lddw %r3, 0x8000000000000000
add %r2, %r3
ldxb %r0, [%r2-1]
exit
