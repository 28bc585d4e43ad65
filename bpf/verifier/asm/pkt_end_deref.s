# expect: reject invalid-mem-base
# env: xdp
ldxw %r3, [%r1+4]
ldxb %r0, [%r3-1]
exit
