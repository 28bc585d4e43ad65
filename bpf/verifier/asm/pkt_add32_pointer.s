# expect: reject pointer-arith
# env: xdp
# Any other 32-bit arithmetic on a pointer is still refused.
ldxw %r2, [%r1+4]
ldxw %r1, [%r1+0]
add32 %r2, %r1
mov %r0, 2
exit
