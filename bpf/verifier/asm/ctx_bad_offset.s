# expect: reject ctx-access
# env: xdp
ldxw %r0, [%r1+24]
exit
