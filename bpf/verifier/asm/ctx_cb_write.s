# expect: accept
# env: socket_filter
stw [%r1+48], 7
ldxw %r0, [%r1+48]
exit
