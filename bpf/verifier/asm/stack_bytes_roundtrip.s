# expect: accept
# env: xdp
stw [%r10-4], 1
stw [%r10-8], 2
ldxdw %r0, [%r10-8]
exit
