# expect: reject out-of-bounds
# env: xdp
ldxw %r2, [%r1+0]
ldxb %r0, [%r2+0]
exit
