# expect: reject uninit-stack
# env: xdp
stw [%r10-8], 1
ldxdw %r0, [%r10-8]
exit
