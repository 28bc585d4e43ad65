# expect: accept
# env: socket_filter
stxdw [%r10-8], %r1
ldxdw %r2, [%r10-8]
ldxw %r0, [%r2+0]
exit
