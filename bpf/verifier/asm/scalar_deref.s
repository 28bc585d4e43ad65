# expect: reject invalid-mem-base
# env: xdp
mov %r1, 4096
ldxdw %r0, [%r1+0]
exit
