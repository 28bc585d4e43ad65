# expect: reject uninit-stack
# env: xdp
ldxdw %r0, [%r10-8]
exit
